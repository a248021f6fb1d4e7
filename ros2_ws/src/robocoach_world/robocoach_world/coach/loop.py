"""The RIDI loop itself: Route -> Imagine -> Diagnose -> Improve, one persisted step at a time.

`Coach` decides; `CoachPorts` act. The coach node plugs in ROS ports (the `Imagine` action, the
operator topic and `CollectDemo`, `LoadAdapter` on the executor and the world model), the experiment
plugs in in-process ones, and both run this same code. Every step starts from `CoachState.next_step()`,
so a coach killed at any moment resumes where the state file says, with no demo lost or counted twice.

Once a round is diagnosed, its scorecard goes to `state.round_dir` (scorecard.md, scorecard.json and
clips/*.png): the failure clips ports return are written there right away, so only the frames of clips
that may be shown are held, and only until then. A coach restarted mid-IMAGINE shows clips of the
compositions imagined after the restart only.

    coach = Coach(config, state, compositions, library, registry, store, ports, calibration)
    coach.run()          # until the budget is spent or config.rounds rounds are done

With the run's `ImaginationCalibration` (None: none), rounds are diagnosed with calibrated masses.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from robocoach_skills.composition import Composition
from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.experts.model import ExpertLibrary
from robocoach_skills.experts.registry import AdapterRegistry
from robocoach_world.calibration import ImaginationCalibration
from robocoach_world.coach.acceptance import AcceptanceConfig, check_seeds, check_sites, judge_update, spread
from robocoach_world.coach.allocation import AllocationConfig, Unresponsive, allocate, unresponsive_experts
from robocoach_world.coach.diagnosis import Diagnosis, DiagnosisConfig, diagnose
from robocoach_world.coach.improve import AdapterUpdate, ImproveConfig, improve_experts
from robocoach_world.coach.scorecard import (
    SCORECARD_JSON,
    SCORECARD_MD,
    FailureClip,
    ScorecardConfig,
    pick_clips,
    scorecard,
    write_clips,
)
from robocoach_world.coach.state import Action, CoachState, RequestState
from robocoach_world.records import TrialRecord

log = logging.getLogger("robocoach.coach")


@dataclass
class CoachConfig:
    """How much to teach, how often, and by which rules."""

    budget: int = 150  # subtask demos over all rounds (the paper's hardware protocol)
    demos_per_round: int = 50  # demos requested per round
    diagnosis: DiagnosisConfig = field(default_factory=DiagnosisConfig)
    allocation: AllocationConfig = field(default_factory=AllocationConfig)
    improve: ImproveConfig = field(default_factory=ImproveConfig)
    acceptance: AcceptanceConfig = field(default_factory=AcceptanceConfig)
    scorecard: ScorecardConfig = field(default_factory=ScorecardConfig)

    def __post_init__(self) -> None:
        if self.budget < 0 or self.demos_per_round < 1:
            raise ValueError(
                f"budget must be >= 0 and demos_per_round >= 1, got {self.budget}, {self.demos_per_round}"
            )

    @property
    def rounds(self) -> int:
        """Rounds that spend the budget; a round with nothing to teach still counts as one."""
        return -(-self.budget // self.demos_per_round)


@dataclass
class Imagined:
    """What imagining one composition gave."""

    records: list[TrialRecord]  # every judged trial
    clips: list[FailureClip] = field(default_factory=list)  # failed trials with frames (may be none)


@dataclass
class Collected:
    """What an operator station answered to one request."""

    episode_ids: list[str]  # accepted demos, in the episode store
    rejection: str = ""  # why the station could not (fully) serve it; "" when it did
    retry: bool = False  # the station was busy or unreachable: ask again later, reject nothing


class CoachPorts(Protocol):
    """Everything the coach does to the outside world."""

    def imagine(self, composition: Composition, versions: dict[str, int]) -> Imagined: ...

    def collect(self, request: RequestState) -> Collected: ...

    def deploy_subtask(
        self, composition: Composition, index: int, versions: dict[str, int], seeds: Sequence[int]
    ) -> list[float | None]:
        """Run `composition` up to subtask `index` with the experts at `versions`, once per seed: that
        subtask's final progress per trial (1.0: completed), None where an earlier subtask failed."""
        ...

    def push_adapters(self, versions: Mapping[str, int]) -> None: ...

    def publish_round(self, entry: dict) -> None: ...


class Coach:
    def __init__(
        self,
        config: CoachConfig,
        state: CoachState,
        compositions: Sequence[Composition],
        library: ExpertLibrary,
        registry: AdapterRegistry,
        store: EpisodeStore,
        ports: CoachPorts,
        calibration: ImaginationCalibration | None = None,
    ) -> None:
        if state.budget != config.budget:
            raise ValueError(f"coach state has a budget of {state.budget}, the config {config.budget}")
        self.config, self.state, self.compositions = config, state, list(compositions)
        self.library, self.registry, self.store, self.ports = library, registry, store, ports
        self.calibration = calibration

    @property
    def finished(self) -> bool:
        return self.state.round >= self.config.rounds or self.state.next_step().action == Action.DONE

    def run(self) -> list[dict]:
        """Run rounds until the budget is spent; returns the history of closed rounds."""
        while not self.finished:
            self.step()
        return self.state.history

    def step(self) -> Action:
        """Do the next thing the state asks for (one phase of one round) and persist it."""
        step = self.state.next_step()
        if step.action == Action.IMAGINE:
            self._imagine_and_allocate(set(step.imagined))
        elif step.action == Action.COLLECT:
            self._collect(step.requests)
        elif step.action == Action.IMPROVE:
            self._improve()
        return step.action

    def _diagnosis(self, records: Sequence[TrialRecord] | None = None) -> Diagnosis:
        """The diagnosis of `records`; by default this round's, from the persisted records (so it
        survives a restart)."""
        records = self.state.records if records is None else records
        return diagnose(records, self.compositions, self.config.diagnosis, self.calibration)

    # ------------------------------------------------------------------ phases
    def _imagine_and_allocate(self, done: set[tuple[str, str]]) -> None:
        clips: list[FailureClip] = []  # at most clips_per_pair per pair: the frames held until diagnosed
        for composition in self.compositions:
            if (composition.robot, composition.name) in done:
                continue  # imagined before a restart: its records are in the state already
            imagined = self.ports.imagine(composition, dict(self.state.adapter_versions))
            self.state.add_records(imagined.records)
            clips = pick_clips([*clips, *imagined.clips], self.config.scorecard)
            valid = [r for r in imagined.records if r.valid]
            rate = sum(r.success for r in valid) / len(valid) if valid else float("nan")
            log.info(
                "round %d imagined %s: %d trials, %d valid, success %.0f%%",
                self.state.round, composition.name, len(imagined.records), len(valid), 100 * rate,
            )  # fmt: skip
        budget = min(self.config.demos_per_round, self.state.budget_left)
        diagnosis = self._diagnosis()
        allocation = allocate(diagnosis, budget, self.config.allocation, self._unresponsive(diagnosis))
        log.info("round %d allocation: %s", self.state.round, allocation.note)
        shown = pick_clips(clips, self.config.scorecard, diagnosis)
        written = write_clips(shown, self.state.round_dir, self.config.scorecard)
        self.state.issue_requests(allocation, written)
        self._write_scorecard(diagnosis)  # for the operator while the demos are recorded

    def _unresponsive(self, diagnosis: Diagnosis) -> tuple[Unresponsive, ...]:
        """Experts whose demos of earlier rounds did not lift their pairs (`AllocationConfig.min_gain`),
        judged on each closed round's records as that round diagnosed them."""
        min_gain = self.config.allocation.min_gain
        if min_gain is None:
            return ()
        rounds = []
        for closed in self.state.history:
            records = [TrialRecord.from_dict(r) for r in closed["records"]]
            rejected = {skill for skill, check in closed.get("checks", {}).items() if not check["accepted"]}
            given = {  # demos of a rejected update are carried, not yet in the expert: no verdict on them
                d["pair"]
                for d in closed["allocation"].get("demos", [])
                if d["n_demos"] > 0 and d["expert"] not in rejected
            }
            rounds.append((self._diagnosis(records), given))
        return unresponsive_experts(rounds, diagnosis, min_gain)

    def _collect(self, requests: Sequence[RequestState]) -> None:
        adopted = self.state.adopt_stored(self.store)  # answered while the coach was down
        if adopted:
            log.info("adopted %d demos recorded while the coach was down", len(adopted))
        for request in requests:
            current = self.state.requests[request.request_id]
            if not current.remaining:
                continue
            answer = self.ports.collect(current)
            if answer.retry:  # e.g. still finishing a killed coach's goal: its demos get adopted next step
                log.info(
                    "request %s: station not available (%s); will ask again",
                    current.request_id,
                    answer.rejection,
                )
                return
            counted = sum(self.state.receive_demo(current.request_id, e) for e in answer.episode_ids)
            log.info(
                "request %s (%s on %s): %d demos counted%s",
                current.request_id, current.subtask, current.robot, counted,
                f", rejected: {answer.rejection}" if answer.rejection else "",
            )  # fmt: skip
            if self.state.requests[current.request_id].remaining and (answer.rejection or not counted):
                self.state.reject_request(
                    current.request_id, answer.rejection or "the station recorded nothing"
                )

    def _improve(self) -> None:
        # Skills done before a restart keep what the state recorded; a version published but not recorded
        # is reloaded by improve_experts, not trained again, and checked again.
        demos = {
            skill: [*self.state.carried_demos(skill), *ids]
            for skill, ids in self.state.demos_by_skill().items()
            if skill not in self.state.improved
        }
        updates = improve_experts(
            self.library, self.registry, self.store, demos, self.state.round, self.config.improve,
            run_id=self.state.run_id,
        )  # fmt: skip
        for update in updates:
            check = self._check(update)
            kept = check is None or check["accepted"]
            self.state.record_adapter(update.skill, update.version if kept else update.parent_version, check)
            log.info(
                "round %d retrained %s: v%d from %d new + %d replayed demos%s",
                self.state.round, update.skill, update.version, len(update.new_episode_ids),
                len(update.replay_episode_ids), _check_note(check),
            )  # fmt: skip
        for skill, version in self.state.improved.items():  # a rejected one back to its parent (crash too)
            if self.registry.active_version(skill) != version:
                self.registry.activate(self.library, skill, version)
        # every skill of the round, also those done before a restart: a node that a coach killed mid-push
        # never heard of may still run the old version (loading one twice is harmless)
        self.ports.push_adapters(dict(self.state.improved))
        diagnosis = self._diagnosis()
        card = self._write_scorecard(diagnosis)  # again: a restart may have come before the first write
        entry = self.state.finish_round({"diagnosis": diagnosis.to_dict(), "scorecard": card})
        self.ports.publish_round(entry)

    def _check(self, update: AdapterUpdate) -> dict | None:
        """Deploy `update` and its parent from the check states on the subtasks this round asked demos
        for (coach.acceptance); None: unchecked (checks off, no parent, or no such subtask)."""
        config = self.config.acceptance
        sites = check_sites(self.compositions, self.state.requests.values(), update.skill)
        if config.trials == 0 or update.parent_version is None or not sites:
            return None
        dealt = spread(sites, check_seeds(config.trials))
        start, progress = time.perf_counter(), []
        for version in (update.parent_version, update.version):  # the new one last: it stays loaded
            self.registry.load(self.library, update.skill, version)  # what this process deploys (ACTIVE kept)
            versions = {**self.state.adapter_versions, update.skill: version}
            progress.append(
                [
                    p
                    for (composition, index), seeds in zip(sites, dealt, strict=True)
                    if seeds
                    for p in self.ports.deploy_subtask(composition, index, versions, seeds)
                ]
            )
        return {
            **judge_update(*progress, config),
            "version": update.version,
            "parent": update.parent_version,
            "demos": list(update.new_episode_ids),
            "seconds": time.perf_counter() - start,  # deploying both versions: the check's robot time
            "sites": [f"{composition.subtasks[index]} in {composition.name}" for composition, index in sites],
        }

    def _write_scorecard(self, diagnosis: Diagnosis) -> str:
        """The round's scorecard as markdown and JSON beside its clips (links relative to that folder)."""
        card, data = scorecard(diagnosis, self.state.allocation, self.state.clips)
        folder = self.state.round_dir
        folder.mkdir(parents=True, exist_ok=True)
        (folder / SCORECARD_MD).write_text(card + "\n")
        (folder / SCORECARD_JSON).write_text(json.dumps(data, indent=2))
        return card


def _check_note(check: dict | None) -> str:
    """The log's account of an acceptance check."""
    if check is None:
        return ""
    if not check["paired"]:
        return f"; kept: no check trial reached the subtask under both versions ({check['trials']} tried)"
    verdict = "kept" if check["accepted"] else f"rejected, v{check['parent']} stays active"
    return (
        f"; check over {check['paired']} trials: progress {check['parent_score']:.2f} (v{check['parent']}) "
        f"-> {check['new_score']:.2f}, {verdict}"
    )
