"""Arm sketches: where the arm is in the camera image, drawn from its joint positions.

CoachWorld predicts its own proprioception; the arm's pose then says where the arm must appear in the
frame. A decoder that only sees a hidden vector has to learn that geometry from pixels, which takes far
longer than this machine trains (it learns to copy the last frame instead). The sketch hands it over:
the arm's kinematic chain (`AgnosticKinematics.walk`) projected through the calibrated camera into
soft maps the decoder is conditioned on. The network still draws every pixel; the sketch only says
where. The camera is the scene's own (`sim/mjcf.py`); on a real cell it is the hand-eye calibration.

Channels (each in [0, 1], on a (size x size) grid):
    0  links:   Gaussians along every segment between consecutive chain points (a ridge, at most 1)
    1  hand:    Gaussian blob at the tool centre point
    2  grip:    the hand blob times the gripper opening

>>> from robocoach_skills.action_contract import ACTION_DIM
>>> sketch = ArmSketch(AgnosticKinematics(), link_width=0.025, hand_width=0.03)
>>> maps = sketch(torch.zeros(2, ACTION_DIM), torch.tensor([0, 1]), size=32)
>>> tuple(maps.shape), bool(maps.amax() <= 1)
((2, 3, 32, 32), True)
"""

from __future__ import annotations

import math

import mujoco
import torch
from torch import nn

from robocoach_skills.constants import ROBOTS
from robocoach_skills.kinematics import scene_model
from robocoach_skills.sim import mjcf
from robocoach_world.world.action_repr import AgnosticKinematics

SKETCH_CHANNELS = 3
LINK_SAMPLES = 24  # Gaussians per link: a link spanning 0.8 of the edge gets one every ~1.4 widths (0.025)
# exp() floor: far tails stay normal floats (~1e-13), since subnormal ones slow exp and bmm ~10x on a CPU
MIN_EXPONENT = -30.0
MIN_DEPTH = 1e-3  # [m] points behind the camera are clamped here (they land far off the image)


class ArmSketch(nn.Module):
    """Padded joint vectors -> arm sketches (N, SKETCH_CHANNELS, size, size) (module docstring).

    link_width and hand_width: std of the ridge and the blob as a fraction of the image edge (CoachWorld
    takes them from `WorldConfig`).
    """

    def __init__(self, kinematics: AgnosticKinematics, link_width: float, hand_width: float):
        super().__init__()
        if not (link_width > 0 and hand_width > 0):
            raise ValueError(f"sketch widths must be positive, got {link_width!r}, {hand_width!r}")
        self.kinematics = kinematics
        self.link_width, self.hand_width = link_width, hand_width
        pos, rot, focal = [], [], []
        for robot in ROBOTS:
            model = scene_model(robot)
            data = mujoco.MjData(model)
            mujoco.mj_forward(model, data)
            cam = model.camera(mjcf.CAMERA).id
            pos.append(torch.tensor(data.cam_xpos[cam], dtype=torch.float32))
            rot.append(torch.tensor(data.cam_xmat[cam].reshape(3, 3), dtype=torch.float32))
            focal.append(0.5 / math.tan(math.radians(float(model.cam_fovy[cam])) / 2))  # per image edge
        self.register_buffer("cam_pos", torch.stack(pos), persistent=False)  # (n_robots, 3) world
        self.register_buffer("cam_rot", torch.stack(rot), persistent=False)  # columns: camera axes in world
        self.register_buffer("focal", torch.tensor(focal), persistent=False)  # (n_robots,)

    def project(self, points: torch.Tensor, robot_ids: torch.Tensor) -> torch.Tensor:
        """World points (N, P, 3) [m] of each row's arm -> image coordinates (N, P, 2) as (column, row)
        fractions of the edge, row 0 at the top (what `SimScene.project` gives, divided by the size)."""
        local = (points - self.cam_pos[robot_ids][:, None]) @ self.cam_rot[robot_ids]
        depth = (-local[..., 2]).clamp(min=MIN_DEPTH)  # MuJoCo cameras look along their -z axis
        scale = self.focal[robot_ids][:, None] / depth
        return torch.stack([0.5 + scale * local[..., 0], 0.5 - scale * local[..., 1]], dim=-1)

    @torch.no_grad()
    def forward(self, padded: torch.Tensor, robot_ids: torch.Tensor, size: int) -> torch.Tensor:
        """(N, ACTION_DIM) padded joint positions + gripper, (N,) arm ids -> (N, 3, size, size) maps.

        Every map is a sum of isotropic Gaussians, and each of those is the outer product of a row and
        a column profile: one batched matrix product draws them all. The links are LINK_SAMPLES
        Gaussians spaced along each segment (none on a zero-length one), clipped at 1.
        """
        points, _ = self.kinematics.walk(padded, robot_ids)
        uv = self.project(points, robot_ids)  # (N, P, 2)
        a, ab = uv[:, :-1, None], (uv[:, 1:] - uv[:, :-1])[:, :, None]  # (N, P-1, 1, 2)
        drawn = ab.square().sum(-1) > 0  # (N, P-1, 1)
        # Coincident chain points (joint frames that share an origin: 2 of franka's 9 segments, 4 of
        # PiPER's) draw nothing in any row: leave them out of the sampling instead of weighting them 0.
        kept = drawn.flatten(1).any(0)
        a, ab, drawn = a[:, kept], ab[:, kept], drawn[:, kept]
        along = torch.linspace(0, 1, LINK_SAMPLES, device=uv.device, dtype=uv.dtype)[:, None]
        samples = (a + along * ab).flatten(1, 2)  # (N, segments * LINK_SAMPLES, 2)
        drawn = drawn.to(uv.dtype).expand(-1, -1, LINK_SAMPLES).flatten(1)
        links = self._gaussians(samples, drawn, self.link_width, size).clamp(max=1)
        hand = self._gaussians(uv[:, -1:], torch.ones_like(uv[:, -1:, 0]), self.hand_width, size)
        grip = hand * padded[:, -1, None, None].clamp(0, 1)
        return torch.stack([links, hand, grip], dim=1)

    @staticmethod
    def _gaussians(centres: torch.Tensor, weights: torch.Tensor, width: float, size: int) -> torch.Tensor:
        """sum_q weights[:, q] * exp(-|pixel - centres[:, q]|^2 / (2 width^2)) on a size x size grid of
        pixel centres (edge fractions): centres (N, Q, 2) as (column, row), weights (N, Q) -> (N, S, S)."""
        grid = (torch.arange(size, device=centres.device, dtype=centres.dtype) + 0.5) / size
        z = (grid - centres[..., None]) / width
        profile = torch.exp((-0.5 * z * z).clamp(min=MIN_EXPONENT))  # (N, Q, 2, S)
        return (profile[:, :, 1] * weights[..., None]).transpose(1, 2) @ profile[:, :, 0]
