"""Skill experts: a shared backbone, and per skill a LoRA adapter on the backbone plus a small head.

    frame (B,3,64,64) -> conv stack -> keypoints + mean pool --+
    proprio (B,8) padded -> linear ---------------------------+-> fuse -> trunk --+
    robot_id (B,) -> embedding -------------------------------+                   |
    arguments (B,2) object/target -> embedding ---------------+                   |
    keypoints of the arguments' landmarks, direction (B,10) --+-------------------+ (keypoint_skip)
      ... and in the subtask's first frame (B,4) -------------+  (argument_memory)  |
      ... both cast onto the table, minus the hand (B,8) -----+  (argument_table)   |
    hand pose from proprio by forward kinematics (B,6) ------------------------------+ (hand_skip)
    (LoRA of the active skill on `lora_layers`: every conv and dense layer above)
    features (B,156: 128 + 22 + 6) -> head[skill] -> action deltas (B,K,C) + done logit (B,)

What the head predicts: the chunk *relative to the current proprio*. With `action_space="ee"` (the
default) a delta is a hand motion, C = 5: (dx, dy, dz, dyaw, dgripper) from the hand pose the
proprio puts the hand at (`kinematics.ArmKinematics.hand_pose`), and the joint targets are the
top-down IK solution of that pose, started from the proprio (batched torch, so 64 imagined rollouts
act in one call). With "joint", C = 8: joint deltas, and the targets are proprio + delta. Either
way the delta is small and centred whatever the arm's configuration, is comparable across both
arms, and makes the zero-initialised output layer of a fresh head command "hold the current
position" (with done ~ 0) instead of driving the arm to the zero configuration.

The adapter is passed to the backbone per call (see lora.py), so a batch for skill X reads only X's
adapter and head. Padded channels (the PiPER arm's 7th joint) are masked out of the loss and
zeroed in the returned actions.

    lib = ExpertLibrary(ExpertConfig(), skills=("pick", "place"))
    loss, parts = lib(batch, "pick")                           # training (batch keys: KEY_* below)
    chunk, done_prob = lib.select_action(obs, "pick")          # joint targets (B, K, 8), (B,)
"""

from __future__ import annotations

import re
import zlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import pairwise
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 (the torch idiom)
from torch import nn

from robocoach_skills.action_contract import ACTION_DIM, channel_mask
from robocoach_skills.camera import TablePlane
from robocoach_skills.checkpoint import state_mismatches
from robocoach_skills.composition import UnknownSkillError
from robocoach_skills.constants import (
    ARGUMENT_LANDMARKS,
    KEY_ACTION_CHUNK,
    KEY_ACTION_MASK,
    KEY_ARGUMENTS,
    KEY_DONE,
    KEY_ROBOT_ID,
    KEY_SKILL,
    KEY_SUBTASK_START,
    KEY_SUBTASK_START_KEYPOINTS,
    KEY_VISION,
    LANDMARKS,
    OBS_IMAGE,
    OBS_PROPRIO,
    ROBOTS,
    SUBTASK_ARGUMENTS,
)
from robocoach_skills.experts.config import ExpertConfig
from robocoach_skills.experts.lora import LoRAAdapter, LoRAConv2d, LoRALinear, LowRank
from robocoach_skills.kinematics import HAND_POSE_DIM, ArmKinematics, wrap
from robocoach_skills.sim.ik import IKConfig

Batch = Mapping[str, Any]
OBS_KEYS = (OBS_IMAGE, OBS_PROPRIO, KEY_ROBOT_ID, KEY_ARGUMENTS)  # what select_action reads (and, with
# argument_memory, KEY_SUBTASK_START_KEYPOINTS or else KEY_SUBTASK_START)
SKILL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
# Keypoint distance under which the object-to-target direction is not normalised (an argument without a
# target names the gripper; the frame spans 2 keypoint units, so a pixel is about 0.03).
DIRECTION_EPS = 1e-3


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run a block (module construction) with a fixed CPU RNG, leaving the global RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def skill_seed(base: int, skill: str) -> int:
    """Seed of a skill's fresh adapter and head: independent of the order skills are added."""
    return base + zlib.crc32(skill.encode())


def backbone_feature_size(image_size: int, strides: Sequence[int]) -> int:
    """Edge of the last conv's feature map after convs of these strides ('same' padding)."""
    size = image_size
    for stride in strides:
        size = (size + stride - 1) // stride
    return size


class SpatialSoftArgmax(nn.Module):
    """(B, C, H, W) -> (B, 2C): each channel's expected (x, y) in [-1, 1] under a softmax over pixels.

    Keypoints keep *where* things are (what manipulation needs), unlike global pooling, and make the
    feature width independent of the image size. The temperature is learned.
    """

    def __init__(self) -> None:
        super().__init__()
        self.log_temperature = nn.Parameter(torch.zeros(()))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, C, H * W): each channel's softmax logits over the map's cells."""
        return x.flatten(2) / self.log_temperature.exp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        attn = torch.softmax(self.logits(x), dim=-1).view(b, c, h, w)
        xs = torch.linspace(-1.0, 1.0, w, device=x.device, dtype=x.dtype)  # (W,)
        ys = torch.linspace(-1.0, 1.0, h, device=x.device, dtype=x.dtype)  # (H,)
        kx = (attn.sum(dim=2) * xs).sum(dim=-1)  # (B, C)
        ky = (attn.sum(dim=3) * ys).sum(dim=-1)  # (B, C)
        return torch.cat([kx, ky], dim=-1)  # (B, 2C)


class Backbone(nn.Module):
    """Frame + padded proprio + embodiment + subtask arguments -> features (B, config.backbone_dim).

    LoRA-able by layer name. The arguments (which object, which target) are what lets one expert
    per skill serve every instance of it ("press red_button", "press green_button").
    """

    def __init__(self, config: ExpertConfig) -> None:
        super().__init__()
        c = config
        self.lora_targets = c.lora_layers
        self.lora_rank, self.lora_alpha = c.lora_rank, c.lora_alpha
        chans = (c.image_channels, *c.conv_channels)
        self.strides = c.conv_strides
        self.convs = nn.ModuleList(
            LoRAConv2d(i, o, c.conv_kernel, stride=s, padding=c.conv_kernel // 2)
            for (i, o), s in zip(pairwise(chans), self.strides, strict=True)
        )
        self.norms = nn.ModuleList(nn.GroupNorm(c.norm_groups, o) for o in c.conv_channels)
        self.keypoints = SpatialSoftArgmax()
        self.vision_channels = c.conv_channels[-1]  # C: `vision` gives 2C keypoint coordinates and C pooled
        self.proprio = LoRALinear(ACTION_DIM, c.proprio_hidden)
        self.robot_embed = nn.Embedding(len(ROBOTS), c.robot_embed_dim)
        self.argument_embed = nn.Embedding(len(SUBTASK_ARGUMENTS), c.argument_embed_dim)
        fused = 3 * c.conv_channels[-1] + c.proprio_hidden + c.robot_embed_dim + 2 * c.argument_embed_dim
        self.argument_keypoints = c.argument_keypoints
        if c.argument_keypoints:
            if c.conv_channels[-1] < len(LANDMARKS):
                raise ValueError(
                    f"argument_keypoints needs >= {len(LANDMARKS)} keypoint channels (one per landmark), "
                    f"conv_channels ends with {c.conv_channels[-1]}"
                )
            landmark = [LANDMARKS.index(ARGUMENT_LANDMARKS[a]) for a in SUBTASK_ARGUMENTS]
            self.register_buffer("argument_landmark", torch.tensor(landmark), persistent=False)
            fused += c.argument_dim  # object and target keypoints, their offsets from the gripper's, ...
        self.fuse = LoRALinear(fused, c.embed_dim)
        self.trunk = LoRALinear(c.embed_dim, c.embed_dim)
        self.keypoint_skip = c.keypoint_skip
        self.argument_direction = c.argument_direction
        self.argument_memory = c.argument_memory
        self.table = TablePlane() if c.argument_table else None
        self.table_unit = c.table_unit
        # Keypoints span the feature cells' centres, [-1, 1]; the image's edges are half a cell further.
        cells = backbone_feature_size(c.image_size, self.strides)
        self.keypoint_to_image = (cells - 1) / cells

    def new_adapter(self) -> LoRAAdapter:
        """A fresh (identity) adapter for the configured `lora_layers`, on the current default device."""
        layers = {f"conv{i}": conv for i, conv in enumerate(self.convs)}
        layers |= {"proprio": self.proprio, "fuse": self.fuse, "trunk": self.trunk}
        return LoRAAdapter({n: layers[n] for n in self.lora_targets}, self.lora_rank, self.lora_alpha)

    def feature_map(self, image: torch.Tensor, adapter: LoRAAdapter | None = None) -> torch.Tensor:
        """Frames (B, 3, H, W) -> the last conv's map (B, C, H', W'), which keypoints are read from."""
        x = image
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True)):
            low_rank = adapter.get(f"conv{i}") if adapter is not None else None
            x = F.relu(norm(conv(x, low_rank)))  # (B, C_i, H / stride, W / stride)
        return x

    def vision(
        self, image: torch.Tensor, adapter: LoRAAdapter | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Frames (B, 3, H, W) -> keypoints (B, 2C) (x of every channel, then y) and pooled features (B, C).

        Keypoints say where things are; the spatial mean of the last feature map says what is
        there (a lit button lamp moves no keypoint, yet it is what "pressed" looks like).
        """
        x = self.feature_map(image, adapter)
        return self.keypoints(x), x.mean(dim=(2, 3))

    def argument_offsets(
        self,
        keypoints: torch.Tensor,
        arguments: torch.Tensor,
        start_keypoints: torch.Tensor | None = None,
        robot: torch.Tensor | None = None,
        hand_xy: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Keypoints (B, 2C), arguments (B, 2) -> (B, argument_dim): object xy, target xy, each minus the
        gripper's, with `argument_direction` the unit vector from object to target, and with
        `argument_memory` object xy and target xy in `start_keypoints` (the subtask's first frame),
        each minus the gripper's now. With `argument_table`, then object and target on the table minus
        `hand_xy` (B, 2) [m] of each row's `robot` (B,), now and (with memory) in the first frame.

        One press expert serves both buttons and one pick expert every cube: picking *the* landmark
        keypoint its arguments name is a gating an MLP learns poorly from ten demos, so it is done here.
        """
        landmarks = self.argument_landmark[arguments]  # (B, 2): object, target
        named = _keypoint_xy(keypoints, landmarks)  # (B, 2, 2)
        gripper = _keypoint_xy(keypoints, LANDMARKS.index("gripper"))[:, None]  # (B, 1, 2)
        parts = [named.flatten(1), (named - gripper).flatten(1)]
        if self.argument_direction:
            parts.append(F.normalize(named[:, 1] - named[:, 0], dim=-1, eps=DIRECTION_EPS))
        seen = [named]
        if self.argument_memory:
            if start_keypoints is None:
                raise ValueError("argument_memory needs the keypoints of the subtask's first frame")
            seen.append(_keypoint_xy(start_keypoints, landmarks))
            parts.append((seen[-1] - gripper).flatten(1))
        if self.table is not None:
            if robot is None or hand_xy is None:
                raise ValueError("argument_table needs each row's robot and hand xy")
            hand = hand_xy[:, None].expand(-1, 2, -1)  # (B, 2, 2)
            is_hand = (landmarks == LANDMARKS.index("gripper"))[..., None]  # no argument: the hand itself
            for xy in seen:
                on_table = self.table(xy * self.keypoint_to_image, robot, landmarks)  # (B, 2, 2) [m]
                on_table = torch.where(is_hand, hand, on_table)
                parts.append(((on_table - hand) / self.table_unit).flatten(1))
        return torch.cat(parts, dim=-1)

    def vision_parameters(self) -> list[nn.Parameter]:
        """The parameters of `vision` (besides an adapter): convs, norms and the keypoint temperature."""
        return [*self.convs.parameters(), *self.norms.parameters(), *self.keypoints.parameters()]

    def forward(
        self,
        image: torch.Tensor | None,
        proprio: torch.Tensor,
        robot_id: torch.Tensor,
        arguments: torch.Tensor,
        adapter: LoRAAdapter | None = None,
        start_image: torch.Tensor | None = None,
        hand_xy: torch.Tensor | None = None,
        start_keypoints: torch.Tensor | None = None,
        vision: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`start_image` (B, 3, H, W): the frame the subtask started from, or `start_keypoints` (B, 2C) its
        keypoints (`vision` of it, computed once per subtask): one of them is needed with argument_memory.
        `hand_xy` (B, 2) [m]: where forward kinematics puts the hand (needed with argument_table).
        `vision` (B, 3C): `self.vision(image, adapter)` already computed (KEY_VISION), in place of `image`."""

        def lora(name: str) -> LowRank | None:
            return adapter.get(name) if adapter is not None else None

        if vision is not None:
            keypoints, pooled = vision.split([2 * self.vision_channels, self.vision_channels], dim=1)
        else:
            keypoints, pooled = self.vision(image, adapter)  # (B, 2 * C_last), (B, C_last)
        p = F.relu(self.proprio(proprio, lora("proprio")))  # (B, proprio_hidden)
        r = self.robot_embed(robot_id)  # (B, robot_embed_dim)
        a = self.argument_embed(arguments).flatten(1)  # (B, 2 * argument_embed_dim)
        parts = [keypoints, pooled, p, r, a]
        if self.argument_keypoints:
            if self.argument_memory and start_keypoints is None:
                if start_image is None:
                    raise ValueError(f"argument_memory needs the subtask's first frame ({KEY_SUBTASK_START})")
                start_keypoints = self.vision(start_image, adapter)[0]
            offsets = self.argument_offsets(keypoints, arguments, start_keypoints, robot_id, hand_xy)
            parts.append(offsets)  # (B, argument_dim)
        h = F.relu(self.fuse(torch.cat(parts, dim=-1), lora("fuse")))  # (B, embed_dim)
        features = F.relu(self.trunk(h, lora("trunk")))  # (B, embed_dim)
        return torch.cat([features, offsets], dim=-1) if self.keypoint_skip else features  # (B, backbone_dim)


def _keypoint_xy(keypoints: torch.Tensor, channels: torch.Tensor | int) -> torch.Tensor:
    """Keypoints (B, 2C) (all x, then all y) -> xy of `channels` per row: (B, N) ids -> (B, N, 2), an
    int -> (B, 2)."""
    c = keypoints.shape[1] // 2
    xy = torch.stack([keypoints[:, :c], keypoints[:, c:]], dim=-1)  # (B, C, 2)
    if isinstance(channels, int):
        return xy[:, channels]
    return xy[torch.arange(len(xy), device=xy.device)[:, None], channels]


class ActionHead(nn.Module):
    """features (B, config.feature_dim) -> action deltas (B, K, config.action_channels), done logit (B,).

    The output layer starts at zero (bias of the done logit at `done_bias_init`): a fresh head holds
    the arm still and does not claim the subtask is done.
    """

    def __init__(self, config: ExpertConfig) -> None:
        super().__init__()
        self.chunk_len, self.channels = config.chunk_len, config.action_channels
        self.hidden = nn.Linear(config.feature_dim, config.head_hidden)
        self.out = nn.Linear(config.head_hidden, config.chunk_len * self.channels + 1)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)
        with torch.no_grad():
            self.out.bias[-1] = config.done_bias_init

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.out(F.relu(self.hidden(features)))  # (B, K * C + 1)
        delta = out[:, :-1].reshape(-1, self.chunk_len, self.channels)  # (B, K, C)
        return delta, out[:, -1]


def chunk_loss(
    delta: torch.Tensor,
    done_logit: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor,
    scale: torch.Tensor,
    done: torch.Tensor,
    config: ExpertConfig,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Masked L1 on the action chunk (real channels, in-episode steps only) + weighted BCE on done.

    L1 rather than MSE, as in ACT: it keeps precise targets precise instead of averaging modes. The
    L1 is measured in units of `scale` (C,) so that it is O(1), like the BCE (in radians it would be
    ~0.1 and the done term would steer the shared layers). Only the loss is scaled: a head that
    outputs normalised deltas times action_scale learned ~2x slower under Adam in our tests.
    """
    error = (delta - target).abs() / scale  # (B, K, C)
    action_l1 = (error * mask).sum() / mask.sum().clamp_min(1.0)
    pos_weight = torch.tensor(config.done_pos_weight, device=delta.device, dtype=delta.dtype)
    done_bce = F.binary_cross_entropy_with_logits(done_logit, done.to(delta.dtype), pos_weight=pos_weight)
    loss = action_l1 + config.done_weight * done_bce
    return loss, {"loss": loss.item(), "action_l1": action_l1.item(), "done_bce": done_bce.item()}


def random_shift(images: torch.Tensor, pad: int) -> torch.Tensor:
    """Shift each frame by up to `pad` pixels (replicate-pad, then a random crop per frame).

    A handful of demos pins every object to a few pixel positions; small shifts make the policy
    depend on where things are relative to each other instead (DrQ, Kostrikov et al. 2021).
    """
    b, _, h, w = images.shape
    padded = F.pad(images, (pad, pad, pad, pad), mode="replicate")
    offsets = torch.randint(0, 2 * pad + 1, (b, 2), device=images.device)
    rows = offsets[:, 0, None] + torch.arange(h, device=images.device)  # (B, H)
    cols = offsets[:, 1, None] + torch.arange(w, device=images.device)  # (B, W)
    index = torch.arange(b, device=images.device)[:, None, None]
    return padded.permute(0, 2, 3, 1)[index, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)


def split_by_skill(batch: Batch, skills: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The rows of a mixed-skill batch grouped by skill name (first-seen order).

    `batch["skill"]` is a list of names or (B,) long indices into `skills`. Names are not checked
    here: an unknown one fails clearly when its group is run.
    """
    labels = batch[KEY_SKILL]
    if isinstance(labels, torch.Tensor):
        bad = [i for i in labels.tolist() if not 0 <= i < len(skills)]
        if bad:
            raise ValueError(f"skill indices {bad} out of range for skills {tuple(skills)}")
        labels = [skills[i] for i in labels.tolist()]
    groups = {}
    for name in dict.fromkeys(labels):
        rows = [i for i, label in enumerate(labels) if label == name]
        groups[name] = {k: _take_rows(v, rows) for k, v in batch.items()}
    return groups


def _take_rows(value: Any, rows: list[int]) -> Any:
    if isinstance(value, torch.Tensor):
        return value[torch.tensor(rows, device=value.device)]
    return [value[i] for i in rows]


class ChunkPolicy(nn.Module, ABC):
    """What every expert library and baseline shares: the loss, action decoding, and skill checks.

    Subclasses say how features and heads are picked for a skill (`predict`) and which parameters
    an update for one skill trains (`adapter_parameters`).
    """

    def __init__(self, config: ExpertConfig) -> None:
        super().__init__()
        self.config = config
        masks = np.stack([channel_mask(robot) for robot in ROBOTS]).astype(np.float32)
        self.register_buffer("channel_masks", torch.from_numpy(masks), persistent=False)  # (R, ACTION_DIM)
        c = self.config
        if c.action_space == "ee" or c.hand_skip or c.argument_table:
            self.kinematics = ArmKinematics()
        if c.action_space == "ee":
            scale = [c.position_scale] * 3 + [c.action_scale] * (HAND_POSE_DIM - 3)  # m, m, m, rad, gripper
        else:
            scale = [c.action_scale] * ACTION_DIM
        self.register_buffer("action_scales", torch.tensor(scale), persistent=False)  # (C,)

    @property
    @abstractmethod
    def skills(self) -> tuple[str, ...]:
        """Names this library can run, in the order they were added."""

    @abstractmethod
    def add_skill(self, skill: str) -> None:
        """Create a fresh expert for `skill`."""

    @abstractmethod
    def predict(self, obs: Batch, skill: str) -> tuple[torch.Tensor, torch.Tensor]:
        """obs -> action deltas (B, K, config.action_channels), done logit (B,)."""

    @abstractmethod
    def vision_of(self, skill: str) -> tuple[Backbone, LoRAAdapter | None]:
        """The backbone and adapter `skill` sees with (checks the skill)."""

    def vision_parameters_of(self, skill: str) -> list[nn.Parameter]:
        """Every parameter what `skill` sees depends on: its backbone's vision and its adapter's conv LoRA."""
        backbone, adapter = self.vision_of(skill)
        return [*backbone.vision_parameters(), *_conv_lora_parameters(adapter, self.config)]

    @abstractmethod
    def adapter_parameters(self, skill: str) -> list[nn.Parameter]:
        """The parameters an update of `skill` trains."""

    @abstractmethod
    def backbone_parameters(self) -> list[nn.Parameter]:
        """The shared parameters that stay frozen after pretraining when config.freeze_backbone."""

    def head_features(
        self, backbone: Backbone, obs: Batch, adapter: LoRAAdapter | None = None
    ) -> torch.Tensor:
        """What a head reads (B, config.feature_dim): `backbone`'s features, then the hand pose with
        `hand_skip`."""
        proprio, robot = obs[OBS_PROPRIO], obs[KEY_ROBOT_ID]
        c = self.config
        hand = self.hand_inputs(proprio, robot) if c.hand_skip or c.argument_table else None  # (B, 6)
        features = backbone(
            obs.get(OBS_IMAGE), proprio, robot, obs[KEY_ARGUMENTS], adapter,
            start_image=obs.get(KEY_SUBTASK_START),
            hand_xy=hand[:, :2] if hand is not None else None,
            start_keypoints=obs.get(KEY_SUBTASK_START_KEYPOINTS),
            vision=obs.get(KEY_VISION),
        )  # fmt: skip
        return torch.cat([features, hand], dim=-1) if c.hand_skip else features

    def start_keypoints(self, start_image: torch.Tensor, skill: str) -> torch.Tensor:
        """A subtask's first frame (B, 3, H, W) -> its keypoints (B, 2C) as `skill` sees them.

        That frame does not change while the subtask runs, so an executor computes this once at the
        switch and passes it as KEY_SUBTASK_START_KEYPOINTS, instead of the frame at every call.
        """
        backbone, adapter = self.vision_of(skill)
        with self._inference():
            return backbone.vision(start_image.to(self.device), adapter)[0]

    def hand_inputs(self, proprio: torch.Tensor, robot: torch.Tensor) -> torch.Tensor:
        """Padded proprio (B, ACTION_DIM) -> (B, HAND_INPUT_DIM): x, y, z, cos yaw, sin yaw, gripper, the
        hand pose a head's motions start from (yaw as a point on the circle: no jump at +-pi)."""
        hand = self.kinematics.hand_pose(proprio, robot)  # (B, HAND_POSE_DIM)
        yaw = hand[:, 3:4]
        return torch.cat([hand[:, :3], torch.cos(yaw), torch.sin(yaw), hand[:, 4:]], dim=-1)

    @property
    def device(self) -> torch.device:
        return self.channel_masks.device

    def forward(self, batch: Batch, skill: str) -> tuple[torch.Tensor, dict[str, float]]:
        """Training loss of `skill` on a batch (every row is taken to belong to that skill)."""
        batch = {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        self._check_obs(batch)
        if self.config.shift_pixels and OBS_IMAGE in batch:  # a batch of KEY_VISION has no frames to shift
            batch = {**batch, **self._shifted(batch)}
        delta, done_logit = self.predict(batch, skill)
        target, mask = self.delta_targets(batch)
        return chunk_loss(delta, done_logit, target, mask, self.action_scales, batch[KEY_DONE], self.config)

    def _shifted(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The batch's frames randomly shifted (`random_shift`); a subtask's first frame moves with its
        frame, so that the remembered object keeps its place relative to the gripper now."""
        keys = [k for k in (OBS_IMAGE, KEY_SUBTASK_START) if k in batch]
        shifted = random_shift(torch.cat([batch[k] for k in keys], dim=1), self.config.shift_pixels)
        return dict(zip(keys, shifted.split(self.config.image_channels, dim=1), strict=True))

    def delta_targets(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The recorded chunk as the deltas a head predicts (B, K, C), and which of them count (B, K, C):
        real channels of in-episode steps."""
        chunk, proprio, robot = batch[KEY_ACTION_CHUNK], batch[OBS_PROPRIO], batch[KEY_ROBOT_ID]
        if chunk.shape[1:] != (self.config.chunk_len, ACTION_DIM):
            want = f"(B, {self.config.chunk_len}, {ACTION_DIM})"
            raise ValueError(f"action_chunk must be {want}, got {tuple(chunk.shape)}")
        steps = batch[KEY_ACTION_MASK].to(chunk.dtype)[:, :, None]  # (B, K, 1)
        if self.config.action_space == "joint":
            return chunk - proprio[:, None, :], steps * self.channel_masks[robot][:, None, :]
        hand = self.kinematics.hand_pose(torch.cat([chunk, proprio[:, None]], dim=1), robot)  # (B, K + 1, 5)
        target = hand[:, :-1] - hand[:, -1:]  # from where the proprio puts the hand
        target[..., 3] = wrap(target[..., 3])  # the shorter way round
        return target, steps.expand_as(target)

    def select_action(self, obs: Batch, skill: str) -> tuple[torch.Tensor, torch.Tensor]:
        """obs (image, proprio, robot_id) -> joint targets (B, K, ACTION_DIM), done prob (B,).

        Outputs are on the library's device. Padded channels are exactly 0. Hand motions ("ee") are
        solved within joint limits; otherwise joint limits are the executor's job, not the policy's.
        """
        with self._inference():
            obs = self._observation(obs)
            delta, done_logit = self.predict(obs, skill)  # (B, K, C), (B,)
            proprio, robot = obs[OBS_PROPRIO], obs[KEY_ROBOT_ID]
            mask = self.channel_masks[robot][:, None, :]  # (B, 1, ACTION_DIM)
            if self.config.action_space == "joint":
                chunk = proprio[:, None, :] + delta
            else:
                hand = self.kinematics.hand_pose(proprio, robot)[:, None] + delta  # (B, K, HAND_POSE_DIM)
                start = proprio[:, None, :].expand(-1, self.config.chunk_len, -1)
                ik = IKConfig(max_iters=self.config.ik_iters)
                chunk = self.kinematics.solve_top_down(hand, start, robot, ik)
            return chunk * mask, torch.sigmoid(done_logit)

    def done_probability(self, obs: Batch, skill: str) -> torch.Tensor:
        """obs -> done prob (B,) as `select_action` gives it, without turning the chunk into joint
        targets: for the steps an executor runs from a chunk it already has."""
        with self._inference():
            return torch.sigmoid(self.predict(self._observation(obs), skill)[1])

    def _observation(self, obs: Batch) -> dict[str, torch.Tensor]:
        """What `select_action` reads of `obs`, on the library's device, checked."""
        keys = OBS_KEYS
        if self.config.argument_memory:  # the first frame's keypoints where the executor has them
            remembered = KEY_SUBTASK_START_KEYPOINTS in obs
            keys += (KEY_SUBTASK_START_KEYPOINTS if remembered else KEY_SUBTASK_START,)
        missing = [k for k in keys if k not in obs]
        if missing:
            raise ValueError(f"observation batch lacks {missing}")
        obs = {k: obs[k].to(self.device) for k in keys}
        self._check_obs(obs)
        return obs

    @contextmanager
    def _inference(self) -> Iterator[None]:
        """Eval mode without autograd for the block; the previous mode is restored after it."""
        was_training = self.training
        if was_training:  # switching walks every submodule (LibraryPolicy keeps its library in eval mode)
            self.eval()
        try:
            with torch.inference_mode():
                yield
        finally:
            if was_training:
                self.train()

    def _check_obs(self, obs: Batch) -> None:
        proprio, robot = obs[OBS_PROPRIO], obs[KEY_ROBOT_ID]
        b, c, s = proprio.shape[0], self.config.image_channels, self.config.image_size
        if OBS_IMAGE not in obs and KEY_VISION not in obs:
            raise ValueError(
                f"an observation batch needs {OBS_IMAGE!r} (or {KEY_VISION!r}, the frame's vision)"
            )
        for key in (OBS_IMAGE, KEY_SUBTASK_START):
            if key in obs and tuple(obs[key].shape) != (b, c, s, s):
                raise ValueError(
                    f"{key} must be (B, {c}, {s}, {s}) float in [0, 1], got {tuple(obs[key].shape)}"
                )
        width = 2 * self.config.conv_channels[-1]
        if KEY_VISION in obs and tuple(obs[KEY_VISION].shape) != (b, 3 * width // 2):
            raise ValueError(
                f"{KEY_VISION} must be (B, {3 * width // 2}), got {tuple(obs[KEY_VISION].shape)}"
            )
        start_keypoints = obs.get(KEY_SUBTASK_START_KEYPOINTS)
        if start_keypoints is not None and tuple(start_keypoints.shape) != (b, width):
            shape = tuple(start_keypoints.shape)
            raise ValueError(f"{KEY_SUBTASK_START_KEYPOINTS} must be (B, {width}), got {shape}")
        if tuple(proprio.shape) != (b, ACTION_DIM) or tuple(robot.shape) != (b,):
            raise ValueError(
                f"proprio must be (B, {ACTION_DIM}) padded and robot_id (B,), "
                f"got {tuple(proprio.shape)} and {tuple(robot.shape)} for B={b}"
            )
        if tuple(obs[KEY_ARGUMENTS].shape) != (b, 2):
            shape = tuple(obs[KEY_ARGUMENTS].shape)
            raise ValueError(f"arguments must be (B, 2) object/target ids, got {shape}")

    def _check_skill(self, skill: str) -> None:
        if skill not in self.skills:
            raise UnknownSkillError(f"no expert for skill {skill!r}; known skills: {list(self.skills)}")

    def _check_new_skill(self, skill: str) -> None:
        if not SKILL_NAME.fullmatch(skill):
            raise ValueError(f"skill names are identifiers ([A-Za-z][A-Za-z0-9_]*), got {skill!r}")
        if skill in self.skills:
            raise ValueError(f"skill {skill!r} already exists")


class ExpertLibrary(ChunkPolicy):
    """The RoboCoach experts: one backbone, and per skill a LoRA adapter and an ActionHead."""

    def __init__(self, config: ExpertConfig | None = None, skills: Sequence[str] = ()) -> None:
        super().__init__(config or ExpertConfig())
        with seeded(self.config.seed):
            self.backbone = Backbone(self.config)
        self.adapters = nn.ModuleDict()
        self.heads = nn.ModuleDict()
        for skill in skills:
            self.add_skill(skill)

    @property
    def skills(self) -> tuple[str, ...]:
        return tuple(self.heads)

    def add_skill(self, skill: str) -> None:
        self._check_new_skill(skill)
        with seeded(skill_seed(self.config.seed, skill)):
            adapter, head = self.backbone.new_adapter(), ActionHead(self.config)
        self.adapters[skill] = adapter.to(self.device)
        self.heads[skill] = head.to(self.device)

    def adapter(self, skill: str) -> LoRAAdapter:
        """The LoRA adapter `skill` runs the backbone with."""
        self._check_skill(skill)
        return self.adapters[skill]

    def predict(self, obs: Batch, skill: str) -> tuple[torch.Tensor, torch.Tensor]:
        backbone, adapter = self.vision_of(skill)  # checks the skill first
        return self.heads[skill](self.head_features(backbone, obs, adapter))

    def vision_of(self, skill: str) -> tuple[Backbone, LoRAAdapter | None]:
        return self.backbone, self.adapter(skill)

    def adapter_parameters(self, skill: str) -> list[nn.Parameter]:
        return [*self.adapter(skill).parameters(), *self.heads[skill].parameters()]

    def backbone_parameters(self) -> list[nn.Parameter]:
        return list(self.backbone.parameters())

    def vision_adapter_parameters(self) -> list[nn.Parameter]:
        """Every skill's LoRA on the convolutions: the part of the adapters that moves its keypoints."""
        return [p for s in self.skills for p in _conv_lora_parameters(self.adapter(s), self.config)]

    # Per-skill state as flat tensor dicts ("adapter.layers.fuse.A", "head.out.weight", ...) for artifacts.

    def skill_state_dict(self, skill: str) -> dict[str, torch.Tensor]:
        """The skill's adapter + head tensors (views of the live parameters)."""
        return _skill_state(self.adapter(skill), self.heads[skill])

    def skill_state_template(self) -> dict[str, torch.Tensor]:
        """Names, shapes and dtypes of any skill's state, as storage-free meta tensors."""
        with torch.device("meta"):
            return _skill_state(self.backbone.new_adapter(), ActionHead(self.config))

    def load_skill_state_dict(self, skill: str, tensors: Mapping[str, torch.Tensor]) -> None:
        """Copy `tensors` into the skill's adapter + head (adding the skill if new); all or nothing."""
        problems = state_mismatches(self.skill_state_template(), tensors)
        if problems:
            raise ValueError(f"state for skill {skill!r} does not fit: {'; '.join(problems)}")
        if skill not in self.skills:
            self.add_skill(skill)
        with torch.no_grad():
            for name, live in self.skill_state_dict(skill).items():
                live.copy_(tensors[name])


def _conv_lora_parameters(adapter: LoRAAdapter | None, config: ExpertConfig) -> list[nn.Parameter]:
    """The adapter's LoRA on the convolutions (none without an adapter)."""
    if adapter is None:
        return []
    return [p for name in config.conv_lora_layers for p in adapter.layers[name].parameters()]


def _skill_state(adapter: LoRAAdapter, head: ActionHead) -> dict[str, torch.Tensor]:
    state = {f"adapter.{k}": v for k, v in adapter.state_dict().items()}
    return state | {f"head.{k}": v for k, v in head.state_dict().items()}
