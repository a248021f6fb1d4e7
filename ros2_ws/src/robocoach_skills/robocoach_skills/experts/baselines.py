"""Baselines the coached experts are compared with, on the same batches and the same trainer.

Every baseline is a `ChunkPolicy` built from model.py's `Backbone` and `ActionHead`, so loss,
action decoding and `train.pretrain` / `train.update_adapter` are shared; they differ only in
what a "skill" selects and in what an update trains (`adapter_parameters`):

(a) `SkillConditionedPolicy`: one backbone and one head; the skill enters as a learned embedding
    added to the features. An update for any skill fine-tunes the whole policy.
(b) `SharedAdapterPolicy`: the expert library with ONE LoRA adapter shared by all skills instead of
    one per skill. Heads stay per skill, so the comparison isolates adapter sharing. An update for
    skill X trains the shared adapter and X's head (and so moves every skill).
(c) `EndToEndPolicy`: one independent backbone + head per *composition* (its "skills" are
    composition names), trained on whole-task demos, conditioned on nothing else. Its done head
    predicts the task's end: its loader must label `done` at the task end, not at subtask ends.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from robocoach_skills.experts.config import ExpertConfig
from robocoach_skills.experts.lora import LoRAAdapter
from robocoach_skills.experts.model import (
    ActionHead,
    Backbone,
    Batch,
    ChunkPolicy,
    ExpertLibrary,
    seeded,
    skill_seed,
)


class SkillConditionedPolicy(ChunkPolicy):
    """(a) One shared policy; the skill is a learned embedding added to the backbone features."""

    def __init__(self, config: ExpertConfig | None = None, skills: Sequence[str] = ()) -> None:
        super().__init__(config or ExpertConfig())
        with seeded(self.config.seed):
            self.backbone = Backbone(self.config)
            self.head = ActionHead(self.config)
        self.skill_embeddings = nn.ParameterDict()
        for skill in skills:
            self.add_skill(skill)

    @property
    def skills(self) -> tuple[str, ...]:
        return tuple(self.skill_embeddings)

    def add_skill(self, skill: str) -> None:
        """A unit-variance embedding, so skills are told apart from the first step."""
        self._check_new_skill(skill)
        with seeded(skill_seed(self.config.seed, skill)):
            embedding = torch.randn(self.config.feature_dim)
        self.skill_embeddings[skill] = nn.Parameter(embedding.to(self.device))

    def predict(self, obs: Batch, skill: str) -> tuple[torch.Tensor, torch.Tensor]:
        backbone, _ = self.vision_of(skill)
        return self.head(self.head_features(backbone, obs) + self.skill_embeddings[skill])

    def vision_of(self, skill: str) -> tuple[Backbone, LoRAAdapter | None]:
        self._check_skill(skill)
        return self.backbone, None

    def adapter_parameters(self, skill: str) -> list[nn.Parameter]:
        """Fine-tuned as a whole: every parameter."""
        self._check_skill(skill)
        return list(self.parameters())

    def backbone_parameters(self) -> list[nn.Parameter]:
        return list(self.backbone.parameters())


class SharedAdapterPolicy(ExpertLibrary):
    """(b) The expert library with one LoRA adapter for all skills; heads stay per skill."""

    def __init__(self, config: ExpertConfig | None = None, skills: Sequence[str] = ()) -> None:
        super().__init__(config)
        with seeded(skill_seed(self.config.seed, "shared")):
            self.shared_adapter = self.backbone.new_adapter()
        for skill in skills:
            self.add_skill(skill)

    def add_skill(self, skill: str) -> None:
        self._check_new_skill(skill)
        with seeded(skill_seed(self.config.seed, skill)):
            self.heads[skill] = ActionHead(self.config).to(self.device)

    def adapter(self, skill: str) -> LoRAAdapter:
        self._check_skill(skill)
        return self.shared_adapter


class EndToEndPolicy(ChunkPolicy):
    """(c) One whole policy (backbone + head, no adapter) per composition, keyed by composition name."""

    def __init__(self, config: ExpertConfig | None = None, compositions: Sequence[str] = ()) -> None:
        super().__init__(config or ExpertConfig())
        self.policies = nn.ModuleDict()
        for name in compositions:
            self.add_skill(name)

    @property
    def skills(self) -> tuple[str, ...]:
        """Composition names."""
        return tuple(self.policies)

    def add_skill(self, skill: str) -> None:
        self._check_new_skill(skill)
        with seeded(skill_seed(self.config.seed, skill)):
            policy = nn.ModuleDict({"backbone": Backbone(self.config), "head": ActionHead(self.config)})
        self.policies[skill] = policy.to(self.device)

    def predict(self, obs: Batch, skill: str) -> tuple[torch.Tensor, torch.Tensor]:
        backbone, _ = self.vision_of(skill)
        return self.policies[skill]["head"](self.head_features(backbone, obs))

    def vision_of(self, skill: str) -> tuple[Backbone, LoRAAdapter | None]:
        self._check_skill(skill)
        return self.policies[skill]["backbone"], None

    def adapter_parameters(self, skill: str) -> list[nn.Parameter]:
        """The whole policy of that composition."""
        self._check_skill(skill)
        return list(self.policies[skill].parameters())

    def backbone_parameters(self) -> list[nn.Parameter]:
        return [p for policy in self.policies.values() for p in policy["backbone"].parameters()]
