"""The progress judge: how far along is the active subtask, from the frames seen since it started?

One frame is ambiguous (a released button looks unpressed, a cube above the bin may be going in or
coming out), so the judge reads the history: a small CNN encodes each 64x64 RGB frame, and a GRU
runs over the subtask's frames, seeing at every step the frame's features, their change since the
subtask's first frame, and an embedding of what is being judged (skill, object, target, arm). A
head maps the GRU state to two logits: progress (sigmoid: [0, 1], trained on the soft ground-truth
progress) and done (sigmoid: the probability that the subtask is achieved now, trained on progress
== 1). Progress regression alone is blurry exactly where it matters, at completion; the done score
is what the done rule thresholds.

With `JudgeConfig.hand` (the default) each step also reads the robot's own hand, from its proprio:
the TCP position (forward kinematics) and the gripper reading. At 64x64 a pick's 5 cm lift moves
the hand about two pixels and the cube hides in the fingers; a frames-only judge never learned it
(done score below 0.3 on its own training picks, session 33). Proprio is what the robot knows of
itself, recorded with every episode and predicted by CoachWorld in imagination; object state stays
unread (nothing privileged), so real and imagined video are judged alike.

A pick (`JudgeConfig.hand_skills`) is judged from the hand alone: its rows see no frame features.
With ~20 completed training picks, a judge that saw frames learned which scene layouts end done, not
the lift: its done score followed the frames whatever hand it read, and it confirmed 4 of 17 deployed
expert picks on time (7 at its best threshold). Judged from the hand (fingers held apart by a cube,
the TCP rising), 17 of 17 cross 0.5 on time with no false confirmation of 15 failed picks (session
35, docs/benchmarks.md). What the hand cannot tell, a cube of the wrong colour in the fingers, goes
unseen for picks.

    judge = ProgressJudge(JudgeConfig())
    cond = judge.condition(["franka"], [Subtask("pick", "red_cube")])   # (1, 4) long
    logits, h = judge(frames, cond, proprio=proprio)   # frames (1, T, 64, 64, 3) uint8, proprio (1, T, 8)
                                                       # padded (action_contract.pad) -> (1, T, 2)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from robocoach_skills.action_contract import argument_ids, robot_id
from robocoach_skills.composition import Subtask
from robocoach_skills.constants import ROBOTS, SUBTASK_ARGUMENTS
from robocoach_skills.kinematics import ArmKinematics
from robocoach_skills.skills import get_skill, skill_names

PROGRESS, DONE = 0, 1  # channels of the judge's logits
JUDGE_VERSION = 4  # bump when a checkpoint of the previous version would load into the wrong model
COND_SKILL, COND_OBJECT, COND_TARGET, COND_ROBOT = range(4)  # columns of `ProgressJudge.condition`
HAND_DIM = 4  # per step with JudgeConfig.hand: TCP position (3) in hand_unit, gripper reading (1)


def skill_vocabulary() -> tuple[str, ...]:
    """Skill names in the judge's embedding order (sorted, so registration order cannot shift ids)."""
    return tuple(sorted(skill_names()))


@dataclass
class JudgeConfig:
    """Size of the judge; the defaults train on a laptop CPU in minutes, widen them for a GPU."""

    image_size: int = 64  # square input frame edge [px]
    channels: tuple[int, ...] = (16, 32, 64, 64)  # conv widths; each conv halves the frame edge
    feature_dim: int = 128  # per-frame feature size
    embed_dim: int = 16  # size of each conditioning embedding (skill, object, target, arm)
    hidden_dim: int = 128  # GRU state size
    groups: int = 8  # GroupNorm groups in the encoder (batch-size independent, DDP friendly)
    hand: bool = True  # also read the hand (TCP position, gripper) from proprio; see the module docstring
    hand_unit: float = 0.1  # TCP positions enter in this unit [m]
    hand_skills: tuple[str, ...] = ("pick",)  # skills judged from the hand alone; see the module docstring

    def __post_init__(self) -> None:
        if self.image_size % (2 ** len(self.channels)) != 0:
            raise ValueError(
                f"JudgeConfig.image_size {self.image_size} must be divisible by 2**{len(self.channels)}"
            )
        if any(c % self.groups for c in self.channels):
            raise ValueError(
                f"JudgeConfig.channels {self.channels} must be multiples of groups={self.groups}"
            )
        for name in ("feature_dim", "embed_dim", "hidden_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"JudgeConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.hand_skills and not self.hand:
            raise ValueError("JudgeConfig.hand_skills needs hand=True: those skills are judged from the hand")
        if self.hand_unit <= 0:
            raise ValueError(f"JudgeConfig.hand_unit must be > 0, got {self.hand_unit}")

    @property
    def step_dim(self) -> int:
        """Size of what the judge reads per step: frame features, and the hand where it reads it."""
        return self.feature_dim + (HAND_DIM if self.hand else 0)


class FrameEncoder(nn.Module):
    """(N, H, W, 3) uint8 -> (N, feature_dim): strided convs, GroupNorm, SiLU, one linear layer."""

    def __init__(self, config: JudgeConfig) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = 3
        for c in config.channels:
            layers += [nn.Conv2d(width, c, 3, stride=2, padding=1), nn.GroupNorm(config.groups, c), nn.SiLU()]
            width = c
        self.convs = nn.Sequential(*layers)
        edge = config.image_size // 2 ** len(config.channels)
        self.project = nn.Linear(width * edge * edge, config.feature_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.permute(0, 3, 1, 2).float() / 255.0 - 0.5  # (N, 3, H, W)
        return self.project(self.convs(x).flatten(1))  # (N, F)


class ProgressJudge(nn.Module):
    """Progress of the active subtask at every step of its video; see the module docstring."""

    def __init__(self, config: JudgeConfig) -> None:
        super().__init__()
        self.config = config
        self.skills = skill_vocabulary()
        self.encoder = FrameEncoder(config)
        if config.hand:
            self.kinematics = ArmKinematics()  # no weights: buffers only, not in checkpoints
        unknown = sorted(set(config.hand_skills) - set(self.skills))
        if unknown:
            raise ValueError(
                f"JudgeConfig.hand_skills {unknown} are not skills; skills: {', '.join(self.skills)}"
            )
        hand_skill = torch.tensor([s in config.hand_skills for s in self.skills])
        self.register_buffer("hand_skill", hand_skill, persistent=False)  # (n_skills,) bool, by skill id
        e = config.embed_dim
        self.skill_embed = nn.Embedding(len(self.skills), e)
        self.argument_embed = nn.Embedding(len(SUBTASK_ARGUMENTS), e)  # shared by object and target
        self.robot_embed = nn.Embedding(len(ROBOTS), e)
        cond_dim = 4 * e
        self.gru = nn.GRU(2 * config.step_dim + cond_dim, config.hidden_dim, batch_first=True)
        self.head = nn.Sequential(
            nn.Linear(config.hidden_dim + cond_dim, config.hidden_dim),
            nn.SiLU(),
            nn.Linear(config.hidden_dim, 2),
        )

    def condition(self, robots: Sequence[str], subtasks: Sequence[Subtask]) -> torch.Tensor:
        """(B, 4) long ids (skill, object, target, arm) of what each row judges."""
        rows = []
        for robot, subtask in zip(robots, subtasks, strict=True):
            get_skill(subtask.skill)  # unknown skills fail here, naming the known ones
            rows.append([self.skills.index(subtask.skill), *argument_ids(subtask), robot_id(robot)])
        return torch.tensor(rows, dtype=torch.long, device=self.skill_embed.weight.device)

    def embed(self, cond: torch.Tensor) -> torch.Tensor:
        """(B, 4) ids -> (B, 4 * embed_dim)."""
        return torch.cat(
            [
                self.skill_embed(cond[:, COND_SKILL]),
                self.argument_embed(cond[:, COND_OBJECT]),
                self.argument_embed(cond[:, COND_TARGET]),
                self.robot_embed(cond[:, COND_ROBOT]),
            ],
            dim=-1,
        )

    def observe(
        self, frames: torch.Tensor, proprio: torch.Tensor | None, robots: torch.Tensor
    ) -> torch.Tensor:
        """(N, H, W, 3) uint8 frames, (N, 8) padded proprio (None for a frames-only judge), (N,) robot
        ids -> (N, step_dim): what the judge reads at each step."""
        features = self.encoder(frames)  # (N, F)
        if not self.config.hand:
            return features
        if proprio is None:
            raise ValueError("this judge reads the hand (JudgeConfig.hand): pass each frame's proprio")
        proprio = proprio.to(features)
        position, _ = self.kinematics.tcp_pose(proprio, robots)  # (N, 3) [m]
        return torch.cat([features, position / self.config.hand_unit, proprio[:, -1:]], dim=-1)

    def step(
        self, features: torch.Tensor, start: torch.Tensor, cond: torch.Tensor, hidden: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Advance the GRU over T steps of what `observe` read.

        features (B, T, S), start (B, S) of the subtask's first frame, cond (B, 4),
        hidden (1, B, hidden_dim) or None at the subtask's start -> (logits (B, T, 2), hidden).
        """
        c = self.embed(cond)  # (B, 4e)
        hand_rows = self.hand_skill[cond[:, COND_SKILL]]  # (B,)
        if hand_rows.any():  # hand skills see no frames: their frame features are zeroed
            f = self.config.feature_dim
            features, start = features.clone(), start.clone()
            features[hand_rows, :, :f], start[hand_rows, :f] = 0.0, 0.0
        t = features.shape[1]
        c_t = c[:, None].expand(-1, t, -1)  # (B, T, 4e)
        x = torch.cat([features, features - start[:, None], c_t], dim=-1)  # (B, T, 2S + 4e)
        out, hidden = self.gru(x, hidden)  # (B, T, hidden_dim)
        logits = self.head(torch.cat([out, c_t], dim=-1))  # (B, T, 2): PROGRESS, DONE
        return logits, hidden

    def forward(
        self,
        frames: torch.Tensor,
        cond: torch.Tensor,
        mask: torch.Tensor | None = None,
        proprio: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """frames (B, T, H, W, 3) uint8 from each row's subtask start, cond (B, 4), mask (B, T) bool of
        real (unpadded) frames, proprio (B, T, 8) padded (needed with JudgeConfig.hand) ->
        (logits (B, T, 2), final hidden). Padded frames are never encoded."""
        b, t = frames.shape[:2]
        if mask is None:
            mask = torch.ones(b, t, dtype=torch.bool, device=frames.device)
        robots = cond[:, COND_ROBOT, None].expand(b, t)
        features = frames.new_zeros(b, t, self.config.step_dim, dtype=torch.float32)
        features[mask] = self.observe(frames[mask], None if proprio is None else proprio[mask], robots[mask])
        return self.step(features, features[:, 0], cond, None)
