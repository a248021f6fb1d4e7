"""Method (f): an end-to-end policy per composition, taught by whole-task demos matched in demo frames.

Every training composition has its own whole policy (`EndToEndPolicy`: backbone + head, no adapter),
conditioned on nothing but the observation. `WholeTaskTeacher` spends the budget on the coach's
schedule (the same `CoachConfig`: rounds, demos per round, adapter update steps, replay): each round
the scripted operator records whole-task demos (`ScriptedOperator.demo_composition`), round-robin over
the training compositions, slot k from initial-state seed WHOLE_TASK_SEED_BASE + k (apart from
evaluation and imagination seeds); then the policy of every composition that got demos is fine-tuned
on them plus a replay sample of its older demos, as the coach retrains an adapter.

Frame budget: a round may spend its subtask-demo budget times `frames_per_demo`, the mean length of
the arm's bootstrap subtask demos of the skills the training compositions use. A fixed budget, rather
than the frames the reference method spent in the same round, keeps every run independent of the
others (no ordering between methods); experiment.json records the frames every method spent per
round. A round records until the run's frames reach the sum of the frame budgets so far: its last
demo may overshoot, and the next round's share shrinks by as much, so the run ends within one
whole-task demo of the matched total.

Budget 0: the bootstrap demos chained per composition. Each composition's policy starts from the
bootstrap backbone with a fresh head and is fitted on the bootstrap subtask demos recorded in that
composition (both arms), each taken as the piece of the task it was recorded as. So at budget 0 (f)
has learned from exactly the bootstrap frames the experts learned from.

Evaluation: the router still walks the subtasks (the judge switching, deadlines per skill), so (f) is
scored exactly as the experts are; the policy is told nothing about them (`CompositionPolicy`). A
held-out composition has no policy: the runner counts its trials as failures and lists it as
unsupported.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from robocoach_skills.bootstrap import BACKBONE_DIR
from robocoach_skills.checkpoint import json_bytes, load_checkpoint, replace_file_atomically, save_checkpoint
from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.constants import KEY_ARGUMENTS, KEY_DONE, KEY_EPISODE_ID, KEY_SKILL, KEY_SUBTASK_INDEX
from robocoach_skills.data.dataset import DatasetConfig, EpisodeDataset
from robocoach_skills.data.store import EpisodeStore, episode_index
from robocoach_skills.experts.artifacts import load_backbone
from robocoach_skills.experts.baselines import EndToEndPolicy
from robocoach_skills.experts.registry import VERSION_DIR
from robocoach_skills.experts.train import update_adapter
from robocoach_skills.operator import OperatorConfig, ScriptedOperator
from robocoach_skills.sim.scene import SimScene
from robocoach_skills.skill_policy import LibraryPolicy
from robocoach_skills.teleop.scripted import ScriptedSessionConfig
from robocoach_skills.teleop.session import stable_seed
from robocoach_world.coach.improve import ImproveConfig, seeded_sample
from robocoach_world.coach.loop import CoachConfig
from robocoach_world.coach.state import Action
from robocoach_world.experiment.methods import ROUND_ROBIN

log = logging.getLogger("robocoach.experiment")

WHOLE_TASK_SEED_BASE = 3_000_000  # whole-task demo initial states; evaluation and imagination use 1e6, 2e6
POLICIES_DIR = "end_to_end"  # in the run's experts/: <composition>/v<version>, one checkpoint each
CHECKPOINT_KIND = "end_to_end_policy"
STATE_FILE = "whole_task_state.json"
RECORDER = "whole_task_operator"  # metadata["recorder"] of the whole-task demos


# ---------------------------------------------------------------------------------- data
def composition_demos(
    store: EpisodeStore, composition: Composition, robot: str | None = None, exclude: Iterable[str] = ()
) -> list[str]:
    """Successful demos recorded in `composition`: its bootstrap subtask demos and its whole-task demos."""
    skip = set(exclude)
    return [
        m.episode_id
        for m in store.iter_meta(kind="demo", robot=robot, success=True)
        if m.metadata.get("source_composition") == composition.name and m.episode_id not in skip
    ]


def frames_per_subtask_demo(store: EpisodeStore, robot: str, compositions: Sequence[Composition]) -> float:
    """Mean length of `robot`'s successful bootstrap subtask demos of the skills `compositions` use."""
    skills = {s.skill for c in compositions for s in c.subtasks}
    lengths = [
        m.length
        for m in store.iter_meta(kind="demo", robot=robot, success=True)
        if len(m.composition.subtasks) == 1 and m.composition.subtasks[0].skill in skills
    ]
    if not lengths:
        raise ValueError(f"{store.root} has no {robot} subtask demos of {sorted(skills)} to measure")
    return float(np.mean(lengths))


class WholeTaskDataset(Dataset):
    """A composition's demos as samples for its end-to-end policy: EpisodeDataset samples, relabelled.

    Arguments are zeroed (the policy sees no subtask), `done` is kept only where the composition's last
    subtask is achieved (EndToEndPolicy's done head predicts the task's end), and the skill key is
    dropped so every row trains the composition's policy. A subtask demo is the piece of the task it
    was recorded as (`source_subtask_index`); a whole-task demo starts at subtask 0.
    """

    def __init__(
        self, store: EpisodeStore, composition: Composition, episode_ids: Sequence[str], chunk_len: int
    ) -> None:
        config = DatasetConfig(chunk_len=chunk_len, pad_channels=True, episode_ids=tuple(episode_ids))
        self.samples = EpisodeDataset(store, config)
        self.offsets = {
            episode_index(e): store.meta(e).metadata.get("source_subtask_index", 0)
            for e in self.samples.episode_ids
        }
        self.last = len(composition.subtasks) - 1

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        sample = self.samples[index]
        del sample[KEY_SKILL]
        subtask = self.offsets[int(sample[KEY_EPISODE_ID])] + int(sample[KEY_SUBTASK_INDEX])
        sample[KEY_DONE] = sample[KEY_DONE] * float(subtask == self.last)
        sample[KEY_ARGUMENTS] = torch.zeros_like(sample[KEY_ARGUMENTS])
        return sample


# ---------------------------------------------------------------------------------- policies
def fit(
    policy: EndToEndPolicy,
    composition: Composition,
    store: EpisodeStore,
    episode_ids: Sequence[str],
    steps: int,
    seed: int,
    improve: ImproveConfig | None = None,
) -> dict[str, float]:
    """Train `composition`'s whole policy on `episode_ids` (seed: data order): `steps` steps, then
    `improve`'s dense steps (none without it), in its batch sizes."""
    improve = improve or ImproveConfig(dense_steps=0)
    dataset = WholeTaskDataset(store, composition, episode_ids, policy.config.chunk_len)
    loader = DataLoader(
        dataset, batch_size=improve.batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed)
    )
    metrics, _ = update_adapter(
        policy, composition.name, loader, steps, progress=False,
        dense_steps=improve.dense_steps, dense_batch_size=improve.dense_batch_size, seed=seed,
    )  # fmt: skip
    return metrics


def _policy_dir(experts: Path, composition: str, version: int) -> Path:
    return experts / POLICIES_DIR / composition / f"v{version:04d}"


def _save(policy: EndToEndPolicy, experts: Path, composition: str, version: int, meta: Mapping) -> None:
    state = policy.policies[composition].state_dict()
    save_checkpoint(_policy_dir(experts, composition, version), state, {**meta, "kind": CHECKPOINT_KIND})


def _load(policy: EndToEndPolicy, experts: Path, composition: str, version: int) -> None:
    tensors, _ = load_checkpoint(_policy_dir(experts, composition, version), CHECKPOINT_KIND)
    policy.policies[composition].load_state_dict(tensors)


def init_end_to_end(
    experts: Path, store: EpisodeStore, compositions: Sequence[Composition], steps: int, seed: int
) -> None:
    """Version 0 of every composition's policy: the bootstrap backbone, a fresh head, fitted on the
    composition's chained bootstrap demos (left unfitted, and logged, when it has none)."""
    base = load_backbone(experts / BACKBONE_DIR)
    policy = EndToEndPolicy(base.config)
    for composition in compositions:
        policy.add_skill(composition.name)
        policy.policies[composition.name]["backbone"].load_state_dict(base.backbone.state_dict())
        ids = composition_demos(store, composition)
        if ids:
            metrics = fit(policy, composition, store, ids, steps, seed)
        else:
            metrics = {}
            log.warning("no bootstrap demo was recorded in %s: its policy starts unfitted", composition.name)
        _save(policy, experts, composition.name, 0, {"demos_used": len(ids), "metrics": metrics})


def load_end_to_end(
    experts: Path, versions: Mapping[str, int] | None = None
) -> tuple[EndToEndPolicy, dict[str, int]]:
    """Every composition's policy at its newest version (a version is saved once, when trained), or
    at `versions` (composition -> version)."""
    policy = EndToEndPolicy(load_backbone(experts / BACKBONE_DIR).config)
    loaded = {}
    for folder in sorted((experts / POLICIES_DIR).iterdir()):
        policy.add_skill(folder.name)
        newest = max(int(m[1]) for p in folder.iterdir() if (m := VERSION_DIR.fullmatch(p.name)))
        loaded[folder.name] = newest if versions is None else versions[folder.name]
        _load(policy, experts, folder.name, loaded[folder.name])
    return policy, loaded


class CompositionPolicy:
    """router.SkillPolicy running one composition's end-to-end policy for each of its subtasks.

    The router walks the subtasks as for the experts, so the trial is scored alike, but the policy gets
    the same empty subtask (no object, no target) throughout: it cannot tell the subtasks apart.
    """

    def __init__(self, policy: EndToEndPolicy, composition: Composition, versions: Mapping[str, int]) -> None:
        self.composition = composition
        self.runner = LibraryPolicy(policy, versions)
        self.task = Subtask(composition.name)

    def skills(self) -> tuple[str, ...]:
        return self.composition.skills

    def version(self, skill: str) -> int:
        return self.runner.version(self.composition.name)

    def reset(self) -> None:
        self.runner.reset()

    def act(
        self, obs: dict, subtask: Subtask, robot: str, need_done: bool = True
    ) -> tuple[np.ndarray, float]:
        return self.runner.act(obs, self.task, robot, need_done)


# ---------------------------------------------------------------------------------- the rounds
@dataclass
class WholeTaskState:
    """(f)'s rounds, saved after every demo slot and every retrained policy, so a killed run resumes.

    Closed rounds in `history` carry what the runner reads of a CoachState round: round, allocation
    (with "demos"), requests (with "episode_ids"), improved, and also frame_budget.
    """

    path: Path  # the state file (not stored in it)
    frames_per_demo: float  # frames one subtask demo of the budget is worth
    round: int = 0
    collecting: bool = True  # False: the round's demos are in, its policies are being retrained
    slot: int = 0  # next demo slot of the run: composition slot % n, initial state BASE + slot
    episode_ids: dict[str, list[str]] = field(default_factory=dict)  # this round's demos per composition
    adapter_versions: dict[str, int] = field(default_factory=dict)  # composition -> active version
    history: list[dict] = field(default_factory=list)  # closed rounds

    @classmethod
    def open(cls, path: Path, frames_per_demo: float, versions: Mapping[str, int]) -> WholeTaskState:
        """Resume the state at `path`, or start round 0 there."""
        if path.exists():
            return cls(path=path, **json.loads(path.read_text()))
        state = cls(path, frames_per_demo, adapter_versions=dict(versions))
        state.save()
        return state

    def save(self) -> None:
        replace_file_atomically(self.path, json_bytes({k: v for k, v in asdict(self).items() if k != "path"}))

    def received_ids(self) -> set[str]:
        """Every demo counted so far, all rounds."""
        ids = {e for found in self.episode_ids.values() for e in found}
        return ids | {e for past in self.history for r in past["requests"] for e in r["episode_ids"]}

    @property
    def demos_spent(self) -> int:
        return len(self.received_ids())


class WholeTaskTeacher:
    """(f)'s rounds, stepped like the Coach: `step()` records a round's demos, the next one retrains."""

    def __init__(
        self,
        config: CoachConfig,
        state: WholeTaskState,
        policy: EndToEndPolicy,
        compositions: Sequence[Composition],
        store: EpisodeStore,
        scene: SimScene,
        experts: Path,
        station: ScriptedSessionConfig,
    ) -> None:
        self.config, self.state, self.policy, self.compositions = config, state, policy, list(compositions)
        self.store, self.scene, self.experts, self.station = store, scene, experts, station

    @property
    def finished(self) -> bool:
        return self.state.round >= self.config.rounds

    def frame_budget(self, round_index: int) -> int:
        """Frames round `round_index` may spend: its share of the subtask-demo budget, in frames."""
        demos = min(
            self.config.demos_per_round, self.config.budget - round_index * self.config.demos_per_round
        )
        return round(demos * self.state.frames_per_demo)

    def step(self) -> Action:
        """One phase of the round, as the coach's `step`: collect the round's demos, or retrain."""
        if self.state.collecting:
            self._collect()
            return Action.COLLECT
        self._improve()
        return Action.IMPROVE

    def _frames(self, ids: Iterable[str]) -> int:
        return sum(self.store.meta(e).length for e in ids)

    def _collect(self) -> None:
        state, n = self.state, len(self.compositions)
        target = sum(self.frame_budget(k) for k in range(state.round + 1))
        used = self._frames(state.received_ids())
        stored = {  # slots recorded before a crash, not yet counted
            m.metadata["whole_task_slot"]: m.episode_id
            for m in self.store.iter_meta(kind="demo")
            if m.metadata.get("whole_task_slot", -1) >= state.slot
        }
        failed = 0  # slots in a row whose every take failed; a whole cycle of them ends the round
        while used < target and failed < n:
            composition = self.compositions[state.slot % n]
            episode_id = stored.get(state.slot) or self._record(composition, state.slot)
            if episode_id is None:
                failed += 1
            else:
                failed = 0
                used += self.store.meta(episode_id).length
                state.episode_ids.setdefault(composition.name, []).append(episode_id)
            state.slot += 1
            state.save()
        if used < target:
            log.warning(
                "round %d: %d slots in a row failed every take; %d of %d frames", state.round, n, used, target
            )
        state.collecting = False
        state.save()

    def _record(self, composition: Composition, slot: int) -> str | None:
        """The accepted whole-task demo of `slot`, or None when all its takes failed (each is discarded)."""
        for take in range(self.station.max_takes_per_demo):
            seed = stable_seed(self.station.seed, "whole_task", slot, take)  # fresh hand randomness per take
            episode = ScriptedOperator(OperatorConfig(seed=seed)).demo_composition(
                self.scene, composition, WHOLE_TASK_SEED_BASE + slot
            )
            if episode.success:
                episode.metadata.update(recorder=RECORDER, round=self.state.round, whole_task_slot=slot)
                return self.store.add(episode)
        return None

    def _improve(self) -> None:
        state, improve = self.state, self.config.improve
        version = state.round + 1  # one version per composition and round: retrained at most once
        for name, new in sorted(state.episode_ids.items()):
            composition = next(c for c in self.compositions if c.name == name)
            if _policy_dir(self.experts, name, version).exists():  # trained before a crash
                _load(self.policy, self.experts, name, version)
            else:
                replay = self._replay(composition, new)
                ids = [*new, *replay]
                metrics = fit(
                    self.policy,
                    composition,
                    self.store,
                    ids,
                    improve.steps,
                    improve.seed + state.round,
                    improve,
                )
                meta = {"new_demos": new, "replay_demos": replay, "metrics": metrics}
                _save(self.policy, self.experts, name, version, meta)
            state.adapter_versions[name] = version
            state.save()
        demos = sorted(state.episode_ids.items())
        state.history.append(
            {
                "round": state.round,
                "allocation": {
                    "strategy": ROUND_ROBIN,
                    "demos": [{"composition": c, "n_demos": len(ids)} for c, ids in demos],
                },
                "requests": [{"composition": c, "episode_ids": ids} for c, ids in demos],
                "improved": {c: version for c, _ in demos},
                "adapter_versions": dict(state.adapter_versions),
                "frame_budget": self.frame_budget(state.round),
            }
        )
        log.info("round %d closed: whole-task demos %s", state.round, {c: len(ids) for c, ids in demos})
        state.round, state.collecting, state.episode_ids = state.round + 1, True, {}
        state.save()

    def _replay(self, composition: Composition, new: Sequence[str]) -> list[str]:
        """A seeded sample of the composition's older demos on this arm, `replay_ratio` x as many as `new`."""
        pool = composition_demos(self.store, composition, composition.robot, exclude=new)
        n = round(self.config.improve.replay_ratio * len(new))
        return seeded_sample(pool, n, self.config.improve.seed + self.state.round, composition.name)
