"""Improve, part 3: keep a retrained adapter only if deployment does not show it doing worse.

An update can break the skill it was meant to fix: 10 of 13 25-demo push updates on Franka pushed no
cube where the bootstrap expert got part of the way (docs/bootstrap.md, session 47), and neither the
held-out action loss nor imagination told those updates apart from working ones. So, when
`AcceptanceConfig.trials` > 0, the coach deploys the new version and its parent from the same check
states, on the subtasks the round asked demos for (the subtasks before each run first, by the current
experts), and scores each version by the subtask's mean final progress over the trials that reached
it under both (a completed subtask counts 1). The new version is kept unless it scores more than
`tolerance` below its parent; otherwise the parent stays active and the round's demos are carried
into the skill's next update, so a later round trains on them and its own demos together
(`CoachState.carried_demos`).

The check costs deployed trials (robot time, on a real arm with an operator resetting the scene), not
demos: `trials` per version of every retrained skill each round.

    sites = check_sites(compositions, state.requests.values(), "push")
    check = judge_update(parent_progress, new_progress, AcceptanceConfig(trials=16))
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from robocoach_skills.composition import Composition
from robocoach_skills.evaluation import evaluation_seeds
from robocoach_world.coach.state import RequestState

CHECK_SEED_BASE = 5_000_000  # initial states of the check: apart from evaluation, imagination, probes


@dataclass(frozen=True)
class AcceptanceConfig:
    trials: int = 0  # deployed trials per version of each retrained skill; 0: keep every update unchecked
    tolerance: float = 0.05  # the new version is rejected if its mean progress is lower than this below

    def __post_init__(self) -> None:
        if self.trials < 0 or not 0 <= self.tolerance <= 1:
            raise ValueError(f"AcceptanceConfig: trials must be >= 0 and tolerance in [0, 1]: {self}")


def check_seeds(n: int) -> list[int]:
    """The check's `n` initial-state seeds; the same every round, so both versions and every round
    are deployed from the same states."""
    return evaluation_seeds(n, base=CHECK_SEED_BASE)


def check_sites(
    compositions: Sequence[Composition], requests: Iterable[RequestState], skill: str
) -> list[tuple[Composition, int]]:
    """(composition, subtask index) of each subtask of `skill` the requests asked demos for, in request
    order and once each; requests naming a composition not in `compositions` give none."""
    by_name = {(c.robot, c.name): c for c in compositions}
    sites = []
    for request in requests:
        composition = by_name.get((request.robot, request.composition))
        if request.subtask.skill != skill or composition is None:
            continue
        if request.subtask not in composition.subtasks:
            continue
        site = (composition, composition.subtasks.index(request.subtask))
        if site not in sites:
            sites.append(site)
    return sites


def subtask_outcome(completed: Sequence[bool], progress: Sequence[float], index: int) -> float | None:
    """One check trial's score for subtask `index` from its subtasks' completion and final progress:
    1.0 if it completed, its progress if not, None if an earlier subtask failed (it was never reached).

    >>> subtask_outcome([True, False], [1.0, 0.4], 1), subtask_outcome([False, False], [0.2, 0.0], 1)
    (0.4, None)
    """
    if not all(completed[:index]):
        return None
    return 1.0 if completed[index] else float(progress[index])


def spread(sites: Sequence[tuple[Composition, int]], seeds: Sequence[int]) -> list[list[int]]:
    """`seeds` dealt to `sites` in turn: the seeds each site is deployed from.

    >>> spread(["a", "b"], [10, 11, 12])
    [[10, 12], [11]]
    """
    return [list(seeds[k :: len(sites)]) for k in range(len(sites))]


def judge_update(
    parent: Sequence[float | None], new: Sequence[float | None], config: AcceptanceConfig
) -> dict:
    """The verdict on one update from the subtask's final progress per check trial under each version
    (None: that trial did not reach the subtask). Only trials that reached it under both count.

    >>> v = judge_update([0.2, 0.4, None, 1.0], [0.0, 0.0, 1.0, 0.0], AcceptanceConfig(trials=4))
    >>> v["accepted"], v["paired"], round(v["parent_score"], 3), v["new_score"]
    (False, 3, 0.533, 0.0)
    >>> judge_update([None], [0.5], AcceptanceConfig(trials=1))["accepted"]  # nothing to compare: kept
    True
    """
    if len(parent) != len(new):
        raise ValueError(f"{len(parent)} parent trials but {len(new)} new ones: the check pairs them")
    pairs = [(p, n) for p, n in zip(parent, new, strict=True) if p is not None and n is not None]
    parent_score = sum(p for p, _ in pairs) / len(pairs) if pairs else None
    new_score = sum(n for _, n in pairs) / len(pairs) if pairs else None
    accepted = not pairs or new_score >= parent_score - config.tolerance
    return {
        "accepted": accepted,
        "trials": len(parent),
        "paired": len(pairs),
        "parent_score": parent_score,
        "new_score": new_score,
        "parent_progress": list(parent),
        "new_progress": list(new),
    }
