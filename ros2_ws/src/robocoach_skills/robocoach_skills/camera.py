"""The fixed camera of each robot's workspace, and where a point of its image lies on the table.

The experts find objects as keypoints in the image, but a grasp needs the object where the hand is,
in metres: a head reading the cube's keypoint mapped onto the table picks 10-14 of 16, one reading
image-plane keypoints 6 of 16 (scripts/pick_localization.py, session 31). The map is a ray cast
through a pinhole camera onto the horizontal plane of the landmark's height at rest (a cube's centre,
a button's cap, the drawer handle), so it needs the camera's pose and field of view.
On the embedded default they come from the robot's `WorkspaceLayout`, which also places the MuJoCo
camera (sim/mjcf.py); on a real arm they are the extrinsics of a hand-eye calibration, set in that
robot's layout. World frame: z = 0 is the table top, the arm base at the origin (sim/layout.py).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from robocoach_skills.constants import LANDMARKS, ROBOTS
from robocoach_skills.sim.layout import get_layout


def camera_axes(position, target) -> np.ndarray:
    """(3, 3) columns: the camera's x (right), y (up) and z (backward) axes in the world, for a camera at
    `position` looking at `target` with world z up (MuJoCo's camera convention: it looks along -z)."""
    forward = np.asarray(target, float) - np.asarray(position, float)
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    return np.stack([right, up, -forward], axis=1)


class TablePlane(nn.Module):
    """Image points of landmarks -> where their camera rays meet the plane of each landmark's height at
    rest [m] (`WorkspaceLayout.landmark_height`; the gripper, which has none, gets the table's).

    Image points are normalised: -1 and +1 are the left and right (top and bottom) edges of a square
    image. The camera parameters are buffers built from the layouts, not learned and not saved.
    """

    def __init__(self, robots: tuple[str, ...] = ROBOTS) -> None:
        super().__init__()
        layouts = [get_layout(robot) for robot in robots]
        position = [layout.camera_pos for layout in layouts]
        axes = np.stack([camera_axes(layout.camera_pos, layout.camera_target) for layout in layouts])
        tan_half = [math.tan(math.radians(layout.camera_fovy) / 2) for layout in layouts]
        height = [
            [layout.landmark_height(k) if k != "gripper" else 0.0 for k in LANDMARKS] for layout in layouts
        ]
        buffers = {"position": position, "axes": axes, "tan_half": tan_half, "height": height}
        for name, value in buffers.items():
            self.register_buffer(name, torch.tensor(np.asarray(value), dtype=torch.float32), persistent=False)

    def forward(self, points: torch.Tensor, robot: torch.Tensor, landmarks: torch.Tensor) -> torch.Tensor:
        """Normalised image points (B, N, 2) (x right, y down) of `landmarks` (B, N) (indices into
        LANDMARKS), robot ids (B,) -> plane xy (B, N, 2) [m]."""
        tan_half = self.tan_half[robot][:, None]  # (B, 1)
        local = torch.stack(  # the ray in the camera's frame, depth 1
            [points[..., 0] * tan_half, -points[..., 1] * tan_half, -torch.ones_like(points[..., 0])], dim=-1
        )
        ray = torch.einsum("bij,bnj->bni", self.axes[robot], local)  # (B, N, 3) in the world
        origin = self.position[robot][:, None]  # (B, 1, 3)
        # The camera looks down on the table; a ray at or above the horizon is held just below it.
        down = ray[..., 2].clamp(max=-1e-3)
        height = self.height[robot[:, None], landmarks]  # (B, N)
        reach = (height - origin[..., 2]) / down  # (B, N)
        return (origin + reach[..., None] * ray)[..., :2]
