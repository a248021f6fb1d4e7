"""The coach's state, persisted atomically after every step, so a killed coach resumes where it was.

A round moves IMAGINE -> COLLECT -> IMPROVE and closes into `history`:

    state = CoachState.open(run / "coach_state.json", budget=150, adapter_versions=versions)
    step = state.next_step()                      # what to do now, also right after a restart
    state.add_records(records_of_one_composition) # IMAGINE, once per (robot, composition)
    state.issue_requests(allocation, clips)       # -> COLLECT (IMPROVE if nothing was allocated)
    state.receive_demo(request_id, episode_id)    # COLLECT; -> IMPROVE when no request is open
    state.record_adapter("pick", 3)               # IMPROVE, once per retrained skill (with its check)
    state.finish_round()                          # -> next round's IMAGINE

Every mutator writes the whole state (temp file, fsync, rename, fsync of the directory) before it
returns, so the file on disk is always one of the states the coach passed through. No demo is counted
twice: an episode id counts once over all rounds, a request never takes more than it asked for, and
demos spent are derived from the received ids, never kept as a separate counter that could drift. No
demo is lost: accepted demos are in the episode store (atomically) before anyone is told, and
`adopt_stored` picks up those whose DemoEpisode message the coach missed while it was down.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from robocoach_skills.checkpoint import json_bytes, replace_file_atomically
from robocoach_skills.composition import Subtask
from robocoach_skills.data.store import EpisodeStore
from robocoach_world.coach.allocation import Allocation
from robocoach_world.records import TrialRecord

STATE_VERSION = 1  # bump when the file layout changes incompatibly
REQUEST_ID = "{run}-r{round:03d}-{index:02d}"  # unique per run; the same ids if re-issued after a crash
ROUND_DIR = "round_{round:03d}"  # beside the state file: the round's scorecard and failure clips


class Phase(StrEnum):
    IMAGINE = "imagine"  # gathering the round's judged imagined trials
    COLLECT = "collect"  # demo requests issued; waiting for their episodes
    IMPROVE = "improve"  # demos in; retraining the requested experts' adapters


class Action(StrEnum):
    IMAGINE = "imagine"  # imagine the compositions not in NextStep.imagined, then diagnose and allocate
    COLLECT = "collect"  # (re)publish NextStep.requests; adopt_stored first
    IMPROVE = "improve"  # retrain NextStep.skills, then finish_round
    DONE = "done"  # the demo budget is spent


@dataclass
class RequestState:
    """One demo request (the fields of robocoach_msgs/DemoRequest) and what came back for it."""

    request_id: str
    robot: str
    subtask: Subtask
    composition: str  # where the seeds' initial states come from
    count: int  # accepted demos wanted
    seeds: tuple[int, ...]  # initial-state seeds where failures concentrate
    reason: str
    priority: float  # 0..1, higher first
    round: int
    episode_ids: list[str] = field(default_factory=list)  # accepted demos received, each once
    rejection: str = ""  # the operator's reason, when the request was rejected

    @property
    def remaining(self) -> int:
        return 0 if self.rejection else self.count - len(self.episode_ids)

    def to_dict(self) -> dict:
        return {
            **{k: v for k, v in vars(self).items() if k not in ("subtask", "seeds")},
            "subtask": self.subtask.to_dict(),
            "seeds": list(self.seeds),
        }

    @classmethod
    def from_dict(cls, d: dict) -> RequestState:
        return cls(**{**d, "subtask": Subtask.from_dict(d["subtask"]), "seeds": tuple(d["seeds"])})


@dataclass(frozen=True)
class NextStep:
    action: Action
    imagined: tuple[tuple[str, str], ...] = ()  # IMAGINE: (robot, composition) already recorded this round
    requests: tuple[RequestState, ...] = ()  # COLLECT: open requests; each wants `remaining` more demos
    skills: tuple[str, ...] = ()  # IMPROVE: experts still to retrain this round


@dataclass
class CoachState:
    path: Path  # the state file (not stored in it)
    budget: int  # total demo budget over all rounds
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])  # tells this run's requests apart
    round: int = 0
    phase: Phase = Phase.IMAGINE
    records: list[TrialRecord] = field(default_factory=list)  # this round's judged trials
    allocation: dict = field(default_factory=dict)  # this round's Allocation.to_dict()
    requests: dict[str, RequestState] = field(default_factory=dict)  # this round's, by request id
    improved: dict[str, int] = field(default_factory=dict)  # skill -> version the round left active
    checks: dict[str, dict] = field(default_factory=dict)  # skill -> this round's acceptance check
    clips: list[dict] = field(default_factory=list)  # this round's failure clips (scorecard.write_clips)
    adapter_versions: dict[str, int] = field(default_factory=dict)  # skill -> active version
    history: list[dict] = field(default_factory=list)  # closed rounds (see finish_round)

    # ---- persistence ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: Path,
        budget: int,
        adapter_versions: Mapping[str, int] | None = None,
        run_id: str | None = None,
    ) -> CoachState:
        """Resume the state at `path`, or start round 0 there (with the experts' active versions, and
        `run_id`, 8 hex digits, where a rerun must name its requests alike: None draws one)."""
        path = Path(path)
        if budget < 0:
            raise ValueError(f"demo budget must be >= 0, got {budget!r}")
        if not path.exists():
            state = cls(path, budget, adapter_versions=dict(adapter_versions or {}))
            if run_id is not None:
                state.run_id = run_id
            state.save()
            return state
        state = cls.load(path)
        if state.budget != budget:
            raise ValueError(f"{path} was started with a demo budget of {state.budget}, not {budget}")
        return state

    @classmethod
    def load(cls, path: Path) -> CoachState:
        d = json.loads(Path(path).read_text())
        if d.get("version") != STATE_VERSION:
            raise ValueError(f"{path} has coach state version {d.get('version')!r}, expected {STATE_VERSION}")
        return cls(
            path=Path(path),
            budget=d["budget"],
            run_id=d["run_id"],
            round=d["round"],
            phase=Phase(d["phase"]),
            records=[TrialRecord.from_dict(r) for r in d["records"]],
            allocation=d["allocation"],
            requests={k: RequestState.from_dict(r) for k, r in d["requests"].items()},
            improved=d["improved"],
            checks=d.get("checks", {}),  # absent in states written before updates were checked
            clips=d.get("clips", []),  # absent in states written before clips were kept
            adapter_versions=d["adapter_versions"],
            history=d["history"],
        )

    def to_dict(self) -> dict:
        return {
            "version": STATE_VERSION,
            "budget": self.budget,
            "run_id": self.run_id,
            "round": self.round,
            "phase": str(self.phase),
            "demos_spent": self.demos_spent,  # for readers of the file; derived again on load
            "records": [r.to_dict() for r in self.records],
            "allocation": self.allocation,
            "requests": {k: r.to_dict() for k, r in self.requests.items()},
            "improved": self.improved,
            "checks": self.checks,
            "clips": self.clips,
            "adapter_versions": self.adapter_versions,
            "history": self.history,
        }

    def save(self) -> None:
        """Replace the state file atomically: a crash leaves the old or the new state, never a mix."""
        replace_file_atomically(self.path, json_bytes(self.to_dict()))

    # ---- derived -------------------------------------------------------------------------------

    def received_ids(self) -> set[str]:
        """Every demo episode counted so far, all rounds."""
        ids = {e for r in self.requests.values() for e in r.episode_ids}
        return ids | {e for past in self.history for r in past["requests"] for e in r["episode_ids"]}

    @property
    def demos_spent(self) -> int:
        return len(self.received_ids())

    @property
    def round_dir(self) -> Path:
        """Where this round's scorecard and failure clips go: beside the state file, one folder a round."""
        return self.path.parent / ROUND_DIR.format(round=self.round)

    @property
    def budget_left(self) -> int:
        """Budget not yet spent nor promised to an open request of this round."""
        return self.budget - self.demos_spent - sum(r.remaining for r in self.requests.values())

    def demos_by_skill(self) -> dict[str, list[str]]:
        """This round's received demos pooled per expert (requests sharing a skill train it together)."""
        pooled: dict[str, list[str]] = {}
        for r in self.requests.values():
            if r.episode_ids:
                pooled.setdefault(r.subtask.skill, []).extend(r.episode_ids)
        return pooled

    def carried_demos(self, skill: str) -> list[str]:
        """Demos of `skill` that went into updates rejected since its last kept one (coach.acceptance):
        the skill's next update trains on them as new demos again."""
        carried: list[str] = []
        for past in self.history:
            check = past.get("checks", {}).get(skill)
            if check is not None and not check["accepted"]:
                carried = list(check["demos"])  # the rejected update's new demos: these and earlier carried
            elif skill in past["improved"]:
                carried = []
        return carried

    def next_step(self) -> NextStep:
        """What to do now; call it after `open` to resume a killed coach."""
        if self.phase == Phase.COLLECT:
            return NextStep(Action.COLLECT, requests=tuple(r for r in self.requests.values() if r.remaining))
        if self.phase == Phase.IMPROVE:
            return NextStep(
                Action.IMPROVE, skills=tuple(s for s in self.demos_by_skill() if s not in self.improved)
            )
        if self.budget_left <= 0:
            return NextStep(Action.DONE)
        return NextStep(
            Action.IMAGINE, imagined=tuple(dict.fromkeys((r.robot, r.composition) for r in self.records))
        )

    # ---- steps ---------------------------------------------------------------------------------

    def add_records(self, records: Iterable[TrialRecord]) -> None:
        """Add the judged trials of compositions not yet recorded this round (all of each at once)."""
        self._expect(Phase.IMAGINE)
        records = list(records)
        done = set(self.next_step().imagined)
        again = sorted({(r.robot, r.composition) for r in records} & done)
        if again:
            raise ValueError(f"round {self.round} already has the records of {again}; they would count twice")
        self.records.extend(records)
        self.save()

    def issue_requests(self, allocation: Allocation, clips: Sequence[dict] = ()) -> list[RequestState]:
        """Turn an allocation into requests, one per (pair, composition of its initial states); `clips`
        (PNGs already under `round_dir`) are kept with them for the round's scorecard."""
        self._expect(Phase.IMAGINE)
        if allocation.total > self.budget_left:
            raise ValueError(f"allocation of {allocation.total} demos exceeds the {self.budget_left} left")
        top = max((d.mass for d in allocation.demos), default=1.0)
        for d in allocation.demos:
            by_composition: dict[str, list[int]] = {}
            for ref in d.initial_states:
                by_composition.setdefault(ref.composition, []).append(ref.seed)
            for composition, seeds in by_composition.items():
                request_id = REQUEST_ID.format(run=self.run_id, round=self.round, index=len(self.requests))
                self.requests[request_id] = RequestState(
                    request_id=request_id,
                    robot=d.pair.robot,
                    subtask=d.pair.subtask,
                    composition=composition,
                    count=len(seeds),
                    seeds=tuple(dict.fromkeys(seeds)),
                    reason=f"first timeout at {d.pair} in {d.mass:.0%} of imagined trials (task-balanced)",
                    priority=d.mass / top if top > 0 else 0.0,
                    round=self.round,
                )
        self.allocation = allocation.to_dict()
        self.clips = list(clips)
        self.phase = Phase.COLLECT if self.requests else Phase.IMPROVE
        self.save()
        return list(self.requests.values())

    def receive_demo(self, request_id: str, episode_id: str) -> bool:
        """Count an accepted demo; False (and nothing changes) if it is unknown, a repeat or surplus."""
        request = self.requests.get(request_id)
        if self.phase != Phase.COLLECT or request is None or request.remaining <= 0:
            return False
        if episode_id in self.received_ids():
            return False
        request.episode_ids.append(episode_id)
        self._close_collection_if_done()
        self.save()
        return True

    def reject_request(self, request_id: str, reason: str) -> None:
        """The operator cannot serve a request: its unfilled demos go back to the budget."""
        self._expect(Phase.COLLECT)
        if request_id not in self.requests:
            raise KeyError(f"round {self.round} has no request {request_id!r}")
        self.requests[request_id].rejection = reason or "rejected without a reason"
        self._close_collection_if_done()
        self.save()

    def adopt_stored(self, store: EpisodeStore) -> list[str]:
        """Count demos in `store` answering this round's open requests (recorded while we were down)."""
        adopted = []
        for meta in store.iter_meta(kind="demo"):
            request_id = meta.metadata.get("request_id")
            if request_id in self.requests and self.receive_demo(request_id, meta.episode_id):
                adopted.append(meta.episode_id)
        return adopted

    def record_adapter(self, skill: str, version: int, check: Mapping | None = None) -> None:
        """`skill`'s retraining is done and left `version` active: the published version, or, when its
        acceptance `check` rejected that one, the parent (the check says which demos it trained on)."""
        self._expect(Phase.IMPROVE)
        self.improved[skill] = version
        self.adapter_versions[skill] = version
        if check is not None:
            self.checks[skill] = dict(check)
        self.save()

    def finish_round(self, summary: Mapping | None = None) -> dict:
        """Close the round into `history` (with `summary`, e.g. the diagnosis) and start the next."""
        self._expect(Phase.IMPROVE)
        missing = [s for s in self.demos_by_skill() if s not in self.improved]
        if missing:
            raise ValueError(f"round {self.round} still has to retrain {missing}")
        entry: dict = {
            "round": self.round,
            "records": [r.to_dict() for r in self.records],
            "allocation": self.allocation,
            "requests": [r.to_dict() for r in self.requests.values()],
            "improved": dict(self.improved),
            "checks": dict(self.checks),
            "adapter_versions": dict(self.adapter_versions),
            "summary": dict(summary or {}),
        }
        self.history.append(json.loads(json_bytes(entry)))  # held exactly as the file will hold it
        self.round += 1
        self.phase = Phase.IMAGINE
        self.records, self.allocation, self.requests, self.improved, self.clips = [], {}, {}, {}, []
        self.checks = {}
        self.save()
        return self.history[-1]

    def _expect(self, phase: Phase) -> None:
        if self.phase != phase:
            raise RuntimeError(f"coach round {self.round} is in phase {self.phase}, not {phase}")

    def _close_collection_if_done(self) -> None:
        if not any(r.remaining for r in self.requests.values()):
            self.phase = Phase.IMPROVE
