"""A perception prior for the experts' backbone: teach its keypoints where things are in the frame.

Ten demos per skill cannot teach a conv stack from scratch where a 4 cm cube is in a 64 px frame
under randomised poses, colours and light: bootstrap pick policies trained that way wander 5-12 cm
off the cube. Policies usually start from a pretrained visual encoder; none can be downloaded here,
so the simulator provides one: the first LANDMARKS keypoint channels of `Backbone.vision` are
trained to sit on the projected image position of each landmark (cubes, buttons, bin, pad, drawer
handle, the gripper) in robot-free renders of the workspace, and a linear probe on the pooled
features must tell which button lamps are lit (what a pressed button looks like: no keypoint moves).
The renders need no demonstrator: initial states drawn from every training composition's
distribution, buttons latched at random, the arm placed by IK at random poses over the workspace
and the gripper at a random opening. The experts then learn actions on top of these features
(`ExpertTrainingConfig.freeze_vision`); the probe is discarded.

Besides the keypoints' squared error, each landmark channel's softmax map is trained towards the
landmark's cell (a bilinear split over the four cells around it, `heatmap_loss`): the squared error
alone leaves probability mass spread over the map, which an expectation turns into a 2-3 cm error on a
cube (a grasp needs about 1 cm), and it mixes in other red things such as the red button.

This is sim-privileged supervision of the encoder only; the experts still act from camera frames
and proprioception alone. On a real arm the same slot takes an encoder pretrained elsewhere.

    data = render_landmark_frames("piper", PerceptionConfig(), image_size=64)
    metrics, losses = pretrain_vision(library.backbone, [data], PerceptionConfig())
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 (the torch idiom)
from torch import nn
from tqdm import tqdm

from robocoach_skills.constants import LANDMARKS
from robocoach_skills.device import select_device
from robocoach_skills.experts.model import Backbone, backbone_feature_size
from robocoach_skills.sim.ik import IK_PITCH_WEIGHT, IKConfig, IKSolver, top_down_rotation
from robocoach_skills.sim.layout import BUTTONS, CUBES
from robocoach_skills.sim.mjcf import TCP_SITE
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import training_compositions


@dataclass
class PerceptionConfig:
    """How many frames to render and how long to train the keypoints on them."""

    frames: int = 3000  # rendered frames per arm
    poses_per_state: int = 4  # arm poses rendered per sampled initial state
    reach_margin: float = 0.05  # the gripper is placed up to this far beyond the fixtures' extent [m]
    height_range: tuple[float, float] = (0.03, 0.22)  # gripper height above the table [m]
    latch_probability: float = 0.5  # each button is rendered latched (lamp lit) with this probability
    lamp_weight: float = 0.1  # weight of the lamp probe's BCE next to the landmark MSE
    # Weight of the keypoint maps' cross-entropy against the landmarks' cells (`heatmap_loss`); readers
    # without a keypoint map (the judge's linear probe) skip it. 0 trains the keypoints by MSE alone:
    # a visible cube's keypoint then lands 2.7 cm off (median) instead of 0.8 cm (session 31).
    heatmap_weight: float = 1.0
    steps: int = 1500  # optimiser steps
    batch_size: int = 64
    lr: float = 1e-3  # AdamW
    seed: int = 0  # initial states, poses and batch order

    def __post_init__(self) -> None:
        for name in ("frames", "poses_per_state", "steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"PerceptionConfig.{name} must be >= 1, got {getattr(self, name)}")
        lo, hi = self.height_range
        if not 0 <= lo <= hi:
            raise ValueError(f"PerceptionConfig.height_range must satisfy 0 <= min <= max, got {(lo, hi)}")
        if not 0 <= self.latch_probability <= 1 or self.lamp_weight < 0 or self.heatmap_weight < 0:
            raise ValueError(
                f"PerceptionConfig needs latch_probability in [0, 1], lamp_weight >= 0 and heatmap_weight "
                f">= 0, got {self.latch_probability}, {self.lamp_weight}, {self.heatmap_weight}"
            )


@dataclass
class LandmarkFrames:
    """Rendered frames and where each landmark is in them."""

    images: np.ndarray  # (N, H, W, 3) uint8
    pixels: np.ndarray  # (N, K, 2) float32 landmark (column, row) in the frame (SimScene.project)
    visible: np.ndarray  # (N, K) bool: the landmark is on the table and inside the frame
    lamps: np.ndarray  # (N, len(BUTTONS)) float32: 1 where the button's lamp is lit


class ProbeReadout(NamedTuple):
    """What an encoder under landmark training reads from a batch of frames (`train_landmark_probe`)."""

    keypoints: torch.Tensor  # (B, 2C): all x, then all y, in SpatialSoftArgmax coordinates
    lamp_logits: torch.Tensor  # (B, len(BUTTONS))
    keypoint_logits: torch.Tensor | None = None  # (B, C, cells) softmax logits of each keypoint's map


def landmark_points(state: dict) -> tuple[np.ndarray, np.ndarray]:
    """World positions (K, 3) of LANDMARKS in a privileged state, and which are on the table (K,)."""
    objects, buttons = state["objects"], state["buttons"]
    points = [objects[c]["pos"] for c in CUBES] + [buttons[b]["top_pos"] for b in BUTTONS]
    points += [state["bin"]["pos"], state["pad"]["pos"], state["drawer"]["handle_pos"], state["ee_pos"]]
    present = [objects[c]["present"] for c in CUBES] + [True] * (len(LANDMARKS) - len(CUBES))
    return np.asarray(points, dtype=np.float64), np.asarray(present)


def keypoint_coordinates(pixels: np.ndarray, image_size: int, feature_size: int) -> np.ndarray:
    """Pixel coordinates (..., 2) -> SpatialSoftArgmax coordinates: feature cell centres span [-1, 1]."""
    stride = image_size / feature_size
    cell = pixels / stride - 0.5  # position in feature cells, centre of cell 0 at 0
    return (2.0 * cell / (feature_size - 1) - 1.0).astype(np.float32)


def render_landmark_frames(
    robot: str, config: PerceptionConfig, image_size: int, progress: bool = True
) -> LandmarkFrames:
    """`config.frames` renders of `robot`'s workspace with landmark positions (see the module docstring)."""
    rng = np.random.default_rng([config.seed, sum(map(ord, robot))])
    scene = SimScene(SceneConfig(robot=robot, image_size=image_size))
    ik = IKSolver(scene.model, scene.arm.joint_names, TCP_SITE, IKConfig(pitch_weight=IK_PITCH_WEIGHT[robot]))
    compositions = training_compositions(robot)
    images, pixels, visible, lamps = [], [], [], []
    bar = tqdm(total=config.frames, desc=f"perception frames {robot}", disable=not progress, leave=False)
    try:
        while len(images) < config.frames:
            composition = compositions[int(rng.integers(len(compositions)))]
            scene.reset(composition, int(rng.integers(2**31)))
            for button in BUTTONS:
                if rng.random() < config.latch_probability:
                    scene.latch_button(button)
            state = scene.privileged_state()
            lit = [float(state["buttons"][b]["press_count"] > 0) for b in BUTTONS]
            low, high = _workspace_box(state, config.reach_margin)
            q = np.asarray(scene.arm.home, dtype=np.float64)
            for _ in range(min(config.poses_per_state, config.frames - len(images))):
                target = np.append(rng.uniform(low, high), rng.uniform(*config.height_range))
                q = ik.solve(target, top_down_rotation(rng.uniform(-math.pi, math.pi)), q).q
                scene.place_arm(q, rng.uniform(0.0, 1.0))
                points, present = landmark_points(scene.privileged_state())
                projected = scene.project(points)  # (K, 2)
                inside = np.all((projected >= 0) & (projected < image_size), axis=1)
                images.append(scene.render())
                pixels.append(projected.astype(np.float32))
                visible.append(present & inside)
                lamps.append(lit)
                bar.update()
    finally:
        bar.close()
        scene.close()
    return LandmarkFrames(
        np.stack(images), np.stack(pixels), np.stack(visible), np.asarray(lamps, dtype=np.float32)
    )


def _workspace_box(state: dict, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) bounds of everything on the table, widened by `margin` [m]."""
    points, present = landmark_points(state)
    xy = points[:-1][present[:-1], :2]  # the fixtures and cubes, not the gripper
    return xy.min(axis=0) - margin, xy.max(axis=0) + margin


def landmark_loss(keypoints: torch.Tensor, target: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """Mean squared error of the first K keypoint channels against landmark targets (visible ones only).

    keypoints (B, 2C) as SpatialSoftArgmax returns them (all x, then all y); target (B, K, 2).
    """
    channels, k = keypoints.shape[1] // 2, target.shape[1]
    predicted = torch.stack([keypoints[:, :k], keypoints[:, channels : channels + k]], dim=-1)  # (B, K, 2)
    weight = visible.to(predicted.dtype)[..., None]
    return ((predicted - target) ** 2 * weight).sum() / weight.sum().clamp_min(1.0) / 2


def heatmap_loss(
    logits: torch.Tensor, target: torch.Tensor, visible: torch.Tensor, feature_size: int
) -> torch.Tensor:
    """Cross-entropy of the first K keypoint maps against each visible landmark's cell.

    logits (B, C, feature_size ** 2) (`SpatialSoftArgmax.logits`), target (B, K, 2) in keypoint
    coordinates. The target distribution splits each landmark bilinearly over the four cells around
    it, so its expectation is the landmark itself: the loss sharpens the map without moving the
    keypoint off the sub-cell position the squared error asks for.
    """
    if feature_size < 2:
        raise ValueError(f"a keypoint map needs at least 2 x 2 cells, got {feature_size}")
    b, k = target.shape[:2]
    cells = ((target + 1.0) / 2.0 * (feature_size - 1)).clamp(0, feature_size - 1)  # (B, K, 2): x, y
    low = cells.floor().clamp(max=feature_size - 2)
    frac = cells - low  # (B, K, 2) in [0, 1]
    weights = torch.stack([1.0 - frac, frac], dim=-1)  # (B, K, 2 axes, 2 neighbours)
    split = weights[:, :, 1, :, None] * weights[:, :, 0, None, :]  # (B, K, 2 rows, 2 columns)
    step = torch.arange(2, device=target.device)
    rows = low[..., 1, None, None].long() + step[:, None]  # (B, K, 2, 1)
    cols = low[..., 0, None, None].long() + step[None, :]  # (B, K, 1, 2)
    index = (rows * feature_size + cols).flatten(2)  # (B, K, 4)
    dist = torch.zeros(b, k, feature_size**2, device=target.device, dtype=logits.dtype)
    dist.scatter_add_(2, index, split.flatten(2).to(logits.dtype))
    cross_entropy = -(dist * F.log_softmax(logits[:, :k], dim=-1)).sum(dim=-1)  # (B, K)
    weight = visible.to(logits.dtype)
    return (cross_entropy * weight).sum() / weight.sum().clamp_min(1.0)


def pretrain_vision(
    backbone: Backbone, datasets: Sequence[LandmarkFrames], config: PerceptionConfig, progress: bool = True
) -> tuple[dict[str, float], list[float]]:
    """Train `backbone.vision` (convs, norms, temperature) on landmarks and lamps; returns metrics, losses."""
    channels = backbone.convs[-1].out_channels
    if channels < len(LANDMARKS):
        raise ValueError(
            f"the backbone has {channels} keypoint channels; {len(LANDMARKS)} landmarks need as many"
        )
    device = select_device()
    backbone.to(device)
    probe = nn.Linear(channels, len(BUTTONS)).to(device)  # lamp states from pooled features; discarded

    def read(images: torch.Tensor) -> ProbeReadout:
        maps = backbone.feature_map(images.permute(0, 3, 1, 2).float() / 255.0)
        return ProbeReadout(
            backbone.keypoints(maps), probe(maps.mean(dim=(2, 3))), backbone.keypoints.logits(maps)
        )

    size = datasets[0].images.shape[1]
    metrics, losses = train_landmark_probe(
        read,
        [*backbone.vision_parameters(), *probe.parameters()],
        datasets,
        backbone_feature_size(size, backbone.strides),
        config,
        device,
        desc="pretrain vision",
        progress=progress,
    )
    return {f"vision/{key}": value for key, value in metrics.items()}, losses


def train_landmark_probe(
    read: Callable[[torch.Tensor], ProbeReadout],
    params: Sequence[torch.Tensor],
    datasets: Sequence[LandmarkFrames],
    feature_size: int,
    config: PerceptionConfig,
    device: torch.device,
    desc: str,
    progress: bool = True,
) -> tuple[dict[str, float], list[float]]:
    """Train `params` so that `read` finds the landmarks and tells the lit lamps in `datasets`' renders.

    `read` maps uint8 frames (B, H, W, 3) on `device` to a `ProbeReadout` whose keypoints lie in
    SpatialSoftArgmax coordinates over a `feature_size` grid. Any encoder gets the prior this way: the
    experts' keypoints directly (with their maps, for `heatmap_loss`), the judge's features through a
    linear probe. Returns metrics (landmark RMSE in pixels, lamp accuracy) and the per-step losses.
    """
    images = torch.from_numpy(np.concatenate([d.images for d in datasets]))  # (N, H, W, 3) uint8
    size = images.shape[1]
    pixels = np.concatenate([d.pixels for d in datasets])
    target = torch.from_numpy(keypoint_coordinates(pixels, size, feature_size))  # (N, K, 2)
    visible = torch.from_numpy(np.concatenate([d.visible for d in datasets]))
    lamps = torch.from_numpy(np.concatenate([d.lamps for d in datasets]))
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(config.seed)
    losses, landmark_losses, lamp_hits, start = [], [], [], time.perf_counter()
    for _ in tqdm(range(config.steps), desc=desc, disable=not progress, leave=False):
        rows = torch.randint(len(images), (config.batch_size,), generator=generator)
        readout = read(images[rows].to(device))
        batch_target, batch_visible = target[rows].to(device), visible[rows].to(device)
        landmark = landmark_loss(readout.keypoints, batch_target, batch_visible)
        lit = lamps[rows].to(device)
        lamp_logits = readout.lamp_logits
        loss = landmark + config.lamp_weight * F.binary_cross_entropy_with_logits(lamp_logits, lit)
        if readout.keypoint_logits is not None and config.heatmap_weight > 0:
            heat = heatmap_loss(readout.keypoint_logits, batch_target, batch_visible, feature_size)
            loss = loss + config.heatmap_weight * heat
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        landmark_losses.append(landmark.item())
        lamp_hits.append(((lamp_logits > 0).float() == lit).float().mean().item())
    window = max(1, config.steps // 10)
    last = landmark_losses[-window:]
    # Root-mean-square landmark error in pixels: the keypoint frame spans (feature - 1) cells of `stride` px.
    px_per_unit = size / feature_size * (feature_size - 1) / 2
    metrics = {
        "steps": float(config.steps),
        "frames": float(len(images)),
        "seconds": time.perf_counter() - start,
        "loss_first": losses[0],
        "loss_last": float(np.mean(losses[-window:])),
        "landmark_loss_first": landmark_losses[0],
        "landmark_loss_last": float(np.mean(last)),
        "rmse_px_last": float(math.sqrt(np.mean(last))) * px_per_unit,
        "lamp_accuracy_last": float(np.mean(lamp_hits[-window:])),
    }
    return metrics, losses
