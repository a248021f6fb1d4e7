"""Configuration of the skill experts: one dataclass for the model, its adapters and their training.

Sizes are chosen so a library trains on a laptop CPU in seconds to minutes at 64x64 frames; every
field that shapes a tensor is part of `adapter_signature`, which artifacts store and check on load.

>>> cfg = ExpertConfig(lora_rank=8, lora_alpha=16.0)
>>> cfg.lora_scaling
2.0
>>> cfg.backbone_layer_names()
('conv0', 'conv1', 'conv2', 'proprio', 'fuse', 'trunk')
>>> cfg.lora_layers == cfg.backbone_layer_names(), cfg.conv_lora_layers
(True, ('conv0', 'conv1', 'conv2'))
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from robocoach_skills.action_contract import ACTION_DIM
from robocoach_skills.kinematics import HAND_POSE_DIM

# Names of the backbone layers that are not convolutions (see model.Backbone).
DENSE_LAYERS: tuple[str, ...] = ("proprio", "fuse", "trunk")
# Object xy, target xy, and each minus the gripper's (model.Backbone.argument_offsets) ...
ARGUMENT_KEYPOINT_DIM = 8
# ... and with `argument_direction` (default) the unit vector from the object's keypoint to the target's.
ARGUMENT_DIRECTION_DIM = 2
# ... and with `argument_memory` (default) object xy and target xy in the subtask's first frame, each minus
# the gripper's now.
ARGUMENT_MEMORY_DIM = 4
# ... and with `argument_table` (default) object xy and target xy on the table [table_unit] minus the
# hand's, now and (with `argument_memory`) in the subtask's first frame.
ARGUMENT_TABLE_DIM = 4
# The hand pose a head reads with `hand_skip`: x, y, z [m], cos and sin of the closing-axis yaw, gripper
# (model.ChunkPolicy.hand_inputs).
HAND_INPUT_DIM = 6
# Fields added after libraries were first saved, with the value that reproduces a library saved
# without them: `from_dict` and the adapter signature check fill them in.
LEGACY_VALUES: dict[str, Any] = {
    "keypoint_skip": False,
    "action_space": "joint",
    "hand_skip": False,
    "argument_direction": False,
    "keypoint_stride": 2,
    "argument_memory": False,
    "argument_table": False,
}
# What a head's action chunk is relative to the current proprio (model.ActionHead):
#   "ee": hand motions (dx, dy, dz [m], dyaw [rad], dgripper), made joint targets by top-down IK;
#   "joint": joint deltas [rad] and the gripper's.
ACTION_SPACES: tuple[str, ...] = ("ee", "joint")


@dataclass
class ExpertConfig:
    """Shared backbone, per-skill LoRA adapters and heads, and the optimiser of both training phases."""

    # Inputs.
    image_size: int = 64  # frames are (3, image_size, image_size) float in [0, 1]
    image_channels: int = 3  # RGB
    # Backbone: a stride-2 conv stack, spatial soft-argmax keypoints, an MLP over padded proprio.
    conv_channels: tuple[int, ...] = (32, 64, 64)  # output channels of conv0, conv1, ...
    conv_kernel: int = 3  # square kernel of every conv layer (padding keeps "same" before the stride)
    # Stride of the last conv, whose map the keypoints are read from: 1 keeps it at 16 x 16 for 64 px
    # frames (2: 8 x 8). With the perception prior's heatmap loss it places a visible cube to 0.8 cm
    # (median) instead of 2.7 cm, which is what a grasp needs (docs/bootstrap.md, session 31).
    keypoint_stride: int = 1
    norm_groups: int = 8  # GroupNorm groups after each conv (no running stats: train == eval)
    proprio_hidden: int = 64  # width of the proprio projection
    robot_embed_dim: int = 16  # width of the learned embodiment embedding
    argument_embed_dim: int = 16  # width of the embedding of each subtask argument (object, target)
    embed_dim: int = 128  # width of the fuse and trunk layers (the heads read `feature_dim`)
    argument_keypoints: bool = True  # also feed the keypoints of the subtask's object and target landmarks
    # ... and pass them around the shared fuse/trunk layers straight to each skill's head. Through the
    # frozen fuse layer and a rank-4 adapter alone, a pick expert trained on 100 demos put the hand
    # where the *average* cube is sideways (docs/bootstrap.md, session 13).
    keypoint_skip: bool = True
    # The argument keypoints also give the unit direction from the object to the target (for a push,
    # which side "behind" is; for the drawer, whose target is the gripper, from the handle to the hand).
    argument_direction: bool = True
    # The argument keypoints also say where the object and target were in the frame the subtask started
    # from (relative to the gripper now): a cube the hovering hand covers from the camera is still
    # there. A head reading the cube's first-frame keypoint picks 14 of 16 against 10 of 16 from the
    # current frame's (scripts/pick_localization.py, session 31).
    argument_memory: bool = True
    # The argument keypoints also as points on the table (the camera ray of each keypoint cast onto the
    # plane of its landmark's height, camera.TablePlane), each minus the hand's xy by forward kinematics:
    # where the object is from the hand, in the metres the hand motions are in. A head reading the cube
    # so picks 10-14 of 16, reading image-plane keypoints 6 of 16 (scripts/pick_localization.py).
    argument_table: bool = True
    table_unit: float = 0.1  # [m] per unit of those inputs (offsets up to ~0.5 m become ~5)
    # Every head also reads the hand pose the proprio puts the hand at (forward kinematics), where its
    # hand motions start from. Alone, it kept a push expert's fingertips off the table but did not make
    # it push, and a press update got worse (session 22). With `argument_direction`, fresh Franka
    # bootstraps open the drawer in 15 of 16 trials at both seeds (0 and 0 without them), and bootstraps
    # of both arms succeed on some compositions (0% without, at 4 of 4 seeds); but the close and press
    # got worse at one Franka seed and the PiPER drawer at both (docs/bootstrap.md, session 23).
    # Libraries saved without the fields load without them.
    hand_skip: bool = True
    # Per-skill LoRA adapters.
    lora_rank: int = 4  # r: rank of each low-rank update
    lora_alpha: float = 8.0  # the update is scaled by alpha / r
    # Backbone layers that get LoRA (None: every one, convolutions included). Session 12 kept the convolutions
    # out (an update has no keypoint loss, and a conv LoRA then pinned the gripper keypoint); with the
    # heatmap-trained keypoints and table-plane inputs, a 50-demo Franka pick update picks 63 of 96
    # with conv LoRA against 48 of 96 without (docs/bootstrap.md, session 37). Pretraining keeps the
    # conv LoRAs at identity while the vision layers are frozen (bootstrap.ExpertTrainingConfig).
    lora_layers: tuple[str, ...] | None = None
    # Per-skill heads.
    chunk_len: int = 8  # K: future actions predicted per step (action chunking)
    # Hand motions rather than joint deltas: where the hand goes is a near-linear function of where
    # the keypoints say the object is, while each joint's share of it is not (a 100-demo pick landed
    # 4 of 16 with hand motions against 1 of 16 with joint deltas; docs/bootstrap.md, session 13).
    action_space: str = "ee"  # one of ACTION_SPACES
    action_scale: float = 0.1  # typical |action - proprio| in a chunk [rad, gripper]: the L1 counts in these
    position_scale: float = 0.02  # ... and of the hand's displacement in a chunk [m] ("ee")
    ik_iters: int = 10  # DLS iterations turning a chunk of hand poses into joint targets ("ee")
    head_hidden: int = 128  # hidden width of each skill's head MLP
    done_bias_init: float = -4.0  # initial done logit: a fresh expert says "not done" (p ~ 0.018)
    # Loss.
    done_weight: float = 0.1  # weight of the done BCE; at 1.0 its gradients swamp the L1 in shared layers
    done_pos_weight: float = 1.0  # BCE weight of positive done labels (every achieved frame is one)
    # Training.
    # Training-time random shift of frames (pad + random crop, as in DrQ); 0 = off. Off by default: a
    # shift moves every keypoint by up to that many pixels (4 px: 7 cm at the table) while the hand pose
    # a head reads stays put; with 4, a 50-demo pick update picked 0 of 16, without, 3-5 (session 31).
    shift_pixels: int = 0
    freeze_backbone: bool = True  # after pretraining, adapter updates leave the backbone untouched
    lr: float = 1e-3  # AdamW learning rate (pretraining and adapter updates)
    weight_decay: float = 0.0  # AdamW decoupled decay; 0 leaves directions without gradient unchanged
    grad_clip: float = 1.0  # max global gradient norm
    seed: int = 0  # initialises the backbone; each skill's adapter and head add a hash of its name

    def __post_init__(self) -> None:
        self.conv_channels = tuple(self.conv_channels)
        layers = self.backbone_layer_names() if self.lora_layers is None else self.lora_layers
        self.lora_layers = tuple(layers)
        positive = (
            "image_size",
            "image_channels",
            "conv_kernel",
            "norm_groups",
            "proprio_hidden",
            "robot_embed_dim",
            "argument_embed_dim",
            "embed_dim",
            "lora_rank",
            "chunk_len",
            "head_hidden",
            "ik_iters",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not self.conv_channels or any(c < 1 for c in self.conv_channels):
            raise ValueError(f"conv_channels must be non-empty positive ints, got {self.conv_channels!r}")
        if any(c % self.norm_groups for c in self.conv_channels):
            raise ValueError(
                f"norm_groups={self.norm_groups!r} must divide conv_channels {self.conv_channels!r}"
            )
        for name in ("argument_direction", "argument_memory", "argument_table"):
            if getattr(self, name) and not self.argument_keypoints:
                raise ValueError(f"{name} is part of the argument keypoints: it needs argument_keypoints")
        if self.keypoint_skip and not self.argument_keypoints:
            raise ValueError("keypoint_skip passes the argument keypoints on: it needs argument_keypoints")
        if self.conv_kernel % 2 == 0:
            raise ValueError(f"conv_kernel must be odd (symmetric padding), got {self.conv_kernel!r}")
        if self.keypoint_stride not in (1, 2):
            raise ValueError(f"keypoint_stride must be 1 or 2, got {self.keypoint_stride!r}")
        if self.image_size < math.prod(self.conv_strides):
            raise ValueError(
                f"image_size={self.image_size!r} is too small for conv strides {self.conv_strides}"
            )
        unknown = [n for n in self.lora_layers if n not in self.backbone_layer_names()]
        if unknown or len(set(self.lora_layers)) != len(self.lora_layers):
            raise ValueError(
                f"lora_layers {self.lora_layers!r} must be distinct names from {self.backbone_layer_names()}"
            )
        if self.action_space not in ACTION_SPACES:
            raise ValueError(f"action_space must be one of {ACTION_SPACES}, got {self.action_space!r}")
        for name in ("lora_alpha", "lr", "action_scale", "position_scale", "table_unit"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("done_weight", "done_pos_weight", "weight_decay", "grad_clip"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")

    @property
    def conv_lora_layers(self) -> tuple[str, ...]:
        """The convolutions among `lora_layers`: the part of an adapter that changes what the skill sees."""
        return tuple(n for n in self.lora_layers if n not in DENSE_LAYERS)

    @property
    def conv_strides(self) -> tuple[int, ...]:
        """Stride of each conv: 2, and `keypoint_stride` for the last."""
        return (2,) * (len(self.conv_channels) - 1) + (self.keypoint_stride,)

    @property
    def lora_scaling(self) -> float:
        return self.lora_alpha / self.lora_rank

    @property
    def feature_dim(self) -> int:
        """Width of what every head reads: the backbone's output, plus the hand pose with `hand_skip`."""
        return self.backbone_dim + (HAND_INPUT_DIM if self.hand_skip else 0)

    @property
    def backbone_dim(self) -> int:
        """Width of the backbone's output: the trunk's, plus the skipped keypoints."""
        return self.embed_dim + (self.argument_dim if self.keypoint_skip else 0)

    @property
    def argument_dim(self) -> int:
        """Width of the argument keypoints (model.Backbone.argument_offsets); 0 without them."""
        if not self.argument_keypoints:
            return 0
        direction = ARGUMENT_DIRECTION_DIM if self.argument_direction else 0
        memory = ARGUMENT_MEMORY_DIM if self.argument_memory else 0
        table = ARGUMENT_TABLE_DIM * (2 if self.argument_memory else 1) if self.argument_table else 0
        return ARGUMENT_KEYPOINT_DIM + direction + memory + table

    @property
    def action_channels(self) -> int:
        """Channels of each action in a head's chunk."""
        return HAND_POSE_DIM if self.action_space == "ee" else ACTION_DIM

    def backbone_layer_names(self) -> tuple[str, ...]:
        """Every backbone layer LoRA can target, input to output."""
        return tuple(f"conv{i}" for i in range(len(self.conv_channels))) + DENSE_LAYERS

    def adapter_signature(self) -> dict[str, Any]:
        """The fields that fix an adapter's tensor shapes and meaning (stored with it, checked on load)."""
        keys = (
            "image_channels",
            "conv_channels",
            "conv_kernel",
            "keypoint_stride",
            "proprio_hidden",
            "robot_embed_dim",
            "argument_embed_dim",
            "embed_dim",
            "argument_keypoints",
            "keypoint_skip",
            "argument_direction",
            "argument_memory",
            "argument_table",
            "hand_skip",
            "lora_rank",
            "lora_alpha",
            "lora_layers",
            "chunk_len",
            "action_space",
            "action_scale",
            "head_hidden",
        )
        if self.argument_table:  # (libraries saved before it existed have no table inputs)
            keys += ("table_unit",)
        return {"action_dim": ACTION_DIM, **{k: _jsonable(getattr(self, k)) for k in keys}}

    def to_dict(self) -> dict[str, Any]:
        return {k: _jsonable(v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ExpertConfig:
        """Inverse of `to_dict`; unknown keys are an error (they mean a newer or foreign config), missing
        ones take their `LEGACY_VALUES` (the dict predates them)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown ExpertConfig fields {unknown!r}")
        return cls(**{**LEGACY_VALUES, **d})


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
