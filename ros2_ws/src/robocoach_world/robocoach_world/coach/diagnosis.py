"""Diagnose: aggregate judged trials into task-balanced first-timeout masses per (subtask, expert) pair.

A **pair** is one robot's `Subtask` (skill + object + target + params); its expert is the subtask's
skill. "press_button(red_button)" in `press_push` and in `two_buttons` is therefore ONE pair (one demo
teaches both), while "press_button(green_button)" is another pair served by the same expert. The robot
is part of the key because a demo is recorded on one arm.

A **task** is one (robot, composition) with at least one valid trial. The rule (issue 6, the paper's):

    mass(pair) = (1 / #tasks) * sum over tasks t of  #(valid trials of t whose first timeout is at pair)
                                                      / #(valid trials of t)

so every task weighs the same whatever its number of rollouts; a task without the pair adds 0. A trial
**reaches** subtask i when it succeeded or first failed at i or later; a pair reached fewer than
`min_reach` times (over every occurrence in every task) is not eligible for demos: its mass rests on
too few rollouts.

Worked example: task A (pick, place) has 4 trials, first failures at [1, 1, 0, -1]; task B
(press, place) has 2 trials, failures at [-1, 1]. Then mass(place) = (2/4 + 1/2) / 2 = 0.5,
mass(pick) = (1/4 + 0) / 2 = 0.125, place was reached 3 + 2 = 5 times and completed 2 of them.

**Calibrated** (given the run's `ImaginationCalibration`): a task's count of first timeouts at a pair
is replaced by the calibrated share of trials whose first timeout is there (`first_timeouts`: its
subtasks' imagined completion when reached, mapped to deployed and chained), so a skill imagination
flatters (the Franka drawer, opened in 80 of 80 twins and 13 of 40 deployed) still draws demos, and
one it under-rates draws fewer. Reach counts, eligibility and success when reached stay imagined; a
pair that never failed in imagination is demonstrated from the states that reached it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.measures import wilson_interval
from robocoach_world.calibration import ImaginationCalibration
from robocoach_world.records import TrialRecord


@dataclass(frozen=True)
class DiagnosisConfig:
    """How trials are aggregated."""

    min_reach: int = 5  # pairs reached by fewer valid trials get no demos (the paper's 5)
    top_sites: int = 3  # initial states kept per pair, most failures first
    z: float = 1.96  # Wilson interval of the per-composition success rate (1.96: 95%)

    def __post_init__(self) -> None:
        if self.min_reach < 1:
            raise ValueError(f"DiagnosisConfig.min_reach must be >= 1, got {self.min_reach!r}")
        if self.top_sites < 1:
            raise ValueError(f"DiagnosisConfig.top_sites must be >= 1, got {self.top_sites!r}")
        if self.z <= 0:
            raise ValueError(f"DiagnosisConfig.z must be > 0, got {self.z!r}")


@dataclass(frozen=True)
class Pair:
    """A (subtask, expert) pair: one robot's subtask; the expert is its skill (see module docstring)."""

    robot: str
    subtask: Subtask

    @property
    def expert(self) -> str:
        return self.subtask.skill

    def __str__(self) -> str:
        return f"{self.robot}:{self.subtask}"

    def to_dict(self) -> dict:
        return {"robot": self.robot, "subtask": self.subtask.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> Pair:
        return cls(d["robot"], Subtask.from_dict(d["subtask"]))


@dataclass(frozen=True)
class FailureSite:
    """An initial state where a pair first timed out: what an operator needs to reproduce it."""

    composition: str  # whose initial-state set `initial_state_id` indexes
    subtask_index: int  # where the pair sits in that composition
    initial_state_id: int
    seed: int  # regenerates the initial state (tasks.sample_initial_state)
    failures: int  # valid trials from this state that first timed out at the pair (0: it only reached it)


@dataclass(frozen=True)
class PairDiagnosis:
    pair: Pair
    mass: float  # task-balanced first-timeout mass, 0..1 (calibrated when the diagnosis is)
    reached: int  # valid trials that reached the pair (summed over its occurrences)
    first_failures: int  # of those, trials whose first timeout was at the pair
    eligible: bool  # reached >= min_reach
    sites: tuple[FailureSite, ...]  # where the failures concentrate, most failures first
    calibrated_success_rate: float | None = None  # success_rate mapped by the calibration, if any

    @property
    def success_rate(self) -> float | None:
        """Imagined success of the subtask when reached; None when never reached."""
        return 1.0 - self.first_failures / self.reached if self.reached else None

    def to_dict(self) -> dict:
        return {
            "pair": str(self.pair),
            "robot": self.pair.robot,
            "subtask": self.pair.subtask.to_dict(),
            "expert": self.pair.expert,
            "mass": self.mass,
            "reached": self.reached,
            "first_failures": self.first_failures,
            "success_rate": self.success_rate,
            "calibrated_success_rate": self.calibrated_success_rate,
            "eligible": self.eligible,
            "sites": [asdict(s) for s in self.sites],
        }


@dataclass(frozen=True)
class CompositionDiagnosis:
    robot: str
    composition: str
    route: tuple[
        str, ...
    ]  # subtask -> expert (version in the first valid trial), e.g. "pick(red_cube) -> pick v2"
    trials: int  # valid trials
    invalid: int  # trials dropped because the world-model seeds disagreed
    successes: int

    @property
    def success_rate(self) -> float | None:
        return self.successes / self.trials if self.trials else None

    def interval(self, z: float) -> tuple[float, float] | None:
        return wilson_interval(self.successes, self.trials, z) if self.trials else None


@dataclass(frozen=True)
class Diagnosis:
    pairs: tuple[PairDiagnosis, ...]  # highest mass first, ties by str(pair)
    compositions: tuple[CompositionDiagnosis, ...]  # in order of first appearance
    config: DiagnosisConfig
    calibrated: bool = False  # masses are calibrated first-timeout shares (module docstring)

    def eligible(self) -> list[PairDiagnosis]:
        """Pairs demos may go to: reached often enough and with some first-timeout mass, by rank."""
        return [p for p in self.pairs if p.eligible and p.mass > 0]

    def get(self, pair: Pair) -> PairDiagnosis | None:
        """`pair`'s entry; None when no composition with trials has it."""
        return next((p for p in self.pairs if p.pair == pair), None)

    def to_dict(self) -> dict:
        return {
            "config": asdict(self.config),
            "calibrated": self.calibrated,
            "pairs": [p.to_dict() for p in self.pairs],
            "compositions": [
                {
                    "robot": c.robot,
                    "composition": c.composition,
                    "route": list(c.route),
                    "trials": c.trials,
                    "invalid": c.invalid,
                    "successes": c.successes,
                    "success_rate": c.success_rate,
                    "interval": c.interval(self.config.z),
                }
                for c in self.compositions
            ],
        }


def route_of(composition: Composition, versions: Sequence[int | None]) -> tuple[str, ...]:
    """Each subtask with the expert (version) it was routed to, as the scorecard shows a route.

    >>> from robocoach_skills.tasks import get_composition
    >>> route_of(get_composition("piper", "two_buttons"), [2, None])
    ('press_button(red_button) -> press_button v2', 'press_button(green_button) -> press_button')
    """
    return tuple(
        f"{s} -> {s.skill}" + (f" v{v}" if v is not None else "")
        for s, v in zip(composition.subtasks, versions, strict=True)
    )


def diagnose(
    records: Iterable[TrialRecord],
    compositions: Iterable[Composition],
    config: DiagnosisConfig | None = None,
    calibration: ImaginationCalibration | None = None,
) -> Diagnosis:
    """Score every pair of every composition that has trials; `compositions` resolves record names;
    with a `calibration`, masses are calibrated (module docstring).

    Raises ValueError for a record whose composition is unknown or whose route disagrees with it.
    """
    config = config or DiagnosisConfig()
    known = {(c.robot, c.name): c for c in compositions}
    by_task: dict[tuple[str, str], list[TrialRecord]] = defaultdict(list)
    invalid: Counter[tuple[str, str]] = Counter()
    for record in records:
        key = (record.robot, record.composition)
        if key not in known:
            raise ValueError(f"record of unknown composition {record.composition!r} on {record.robot}")
        if record.skills != known[key].skills:
            raise ValueError(
                f"record of {record.composition!r} routes {record.skills}, "
                f"the composition has {known[key].skills}"
            )
        if record.valid:
            by_task[key].append(record)
        else:
            invalid[key] += 1

    mass: dict[Pair, float] = {}  # every pair of a task with trials is listed, even at zero mass
    reached: Counter[Pair] = Counter()
    failures: Counter[Pair] = Counter()
    sites: dict[Pair, Counter[tuple[str, int, int, int]]] = defaultdict(Counter)
    reach_sites: dict[Pair, Counter[tuple[str, int, int, int]]] = defaultdict(Counter)
    for key, trials in by_task.items():
        comp = known[key]
        pairs = [Pair(comp.robot, s) for s in comp.subtasks]
        failed = [t.first_failed_index for t in trials]  # -1: succeeded
        shares = (  # of the task's trials, those whose first timeout is at each subtask
            [failed.count(i) / len(trials) for i in range(len(pairs))]
            if calibration is None
            else calibration.first_timeouts(comp.robot, comp.skills, failed)
        )
        for pair, share in zip(pairs, shares, strict=True):
            mass[pair] = mass.get(pair, 0.0) + share / len(by_task)
        for t in trials:
            last = len(pairs) - 1 if t.success else t.first_failed_index
            for i, pair in enumerate(pairs[: last + 1]):
                reached[pair] += 1
                reach_sites[pair][(comp.name, i, t.initial_state_id, t.seed)] += 1
            if not t.success:
                pair = pairs[t.first_failed_index]
                failures[pair] += 1
                sites[pair][(comp.name, t.first_failed_index, t.initial_state_id, t.seed)] += 1

    diagnosed = [
        PairDiagnosis(
            pair=pair,
            mass=m,
            reached=reached[pair],
            first_failures=failures[pair],
            eligible=reached[pair] >= config.min_reach,
            sites=tuple(  # states that reached the pair stand in where it never failed
                FailureSite(*site, failures=sites[pair][site])
                for site, _ in sorted(
                    (sites[pair] or reach_sites[pair]).items(), key=lambda kv: (-kv[1], kv[0])
                )[: config.top_sites]
            ),
            calibrated_success_rate=(
                None
                if calibration is None or not reached[pair]
                else calibration.adjust(pair.robot, pair.expert, 1.0 - failures[pair] / reached[pair])
            ),
        )
        for pair, m in mass.items()
    ]
    diagnosed.sort(key=lambda p: (-p.mass, str(p.pair)))
    return Diagnosis(
        tuple(diagnosed), _compositions(known, by_task, invalid), config, calibrated=calibration is not None
    )


def _compositions(
    known: dict[tuple[str, str], Composition],
    by_task: dict[tuple[str, str], list[TrialRecord]],
    invalid: Counter[tuple[str, str]],
) -> tuple[CompositionDiagnosis, ...]:
    out = []
    for key in dict.fromkeys([*by_task, *invalid]):
        comp, trials = known[key], by_task.get(key, [])
        route = route_of(comp, trials[0].versions if trials else (None,) * len(comp.subtasks))
        successes = sum(t.success for t in trials)
        out.append(CompositionDiagnosis(comp.robot, comp.name, route, len(trials), invalid[key], successes))
    return tuple(out)
