"""Improve, part 1: split a round's demo budget over the diagnosed pairs, by a registered strategy.

Strategies see only the eligible pairs' masses, highest first (`Diagnosis.eligible()`), and return
integer demo counts summing to the budget; they are chosen by name (`AllocationConfig.strategy`):

* `top_m` (default, the paper's rule): budget // M demos to each of the top M pairs; the remainder
  goes one demo each to the best-ranked of them. Fewer than M eligible pairs share the whole budget.
* `proportional`: demos proportional to mass, largest-remainder rounding (ties: better rank first).

With `AllocationConfig.min_gain` set (0.05 by default), the pairs of experts whose last demos did not
lift imagined success when reached by that much (`unresponsive_experts`, from the coach's earlier
rounds) are set aside before the strategy runs, as long as some other pair fails too: demos an
expert does not learn from are better spent where another one may (docs/results.md: in session 41,
175 of 300 demos went to picks that did not improve deployed). Measured on 20 states per composition
(session 43), it neither helps nor hurts: Franka, three seeds, 16% at 150 demos with it, 15% without,
17% for uniform acquisition. Its verdict rests on imagined gains, and CoachWorld imagines picks near 0%
where a third complete deployed: it set aside a pick expert that had learned.

>>> ALLOCATORS["top_m"]([0.5, 0.3, 0.1], 11, AllocationConfig())
[6, 5, 0]
>>> ALLOCATORS["proportional"]([0.5, 0.3, 0.2], 11, AllocationConfig())   # quotas 5.5, 3.3, 2.2
[6, 3, 2]

Each pair's demos are spread over the compositions of the initial states where its failures
concentrate (those sites cycled in order); a station demonstrates each site once, then fresh initial
states of the same composition (`teleop.session.DemoTarget.seed`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from itertools import cycle, islice

from robocoach_world.coach.diagnosis import Diagnosis, Pair

Allocator = Callable[[Sequence[float], int, "AllocationConfig"], list[int]]
ALLOCATORS: dict[str, Allocator] = {}


def register_allocator(name: str) -> Callable[[Allocator], Allocator]:
    """Register an allocation strategy under `name` (see module docstring for the contract)."""

    def register(fn: Allocator) -> Allocator:
        if name in ALLOCATORS:
            raise ValueError(f"allocation strategy {name!r} is already registered")
        ALLOCATORS[name] = fn
        return fn

    return register


@dataclass(frozen=True)
class AllocationConfig:
    strategy: str = "top_m"  # a name in ALLOCATORS
    top_m: int = 2  # M of the top_m strategy (the paper's 2)
    # Set an expert's pairs aside while the pairs its last demos went to stay below their imagined success
    # when reached in that round + min_gain (unresponsive_experts); None: never (the paper's rule). Franka,
    # three seeds, 20 states per composition: 16% at 150 demos, 15% without it (docs/results.md, session 43).
    min_gain: float | None = 0.05

    def __post_init__(self) -> None:
        if self.strategy not in ALLOCATORS:
            raise ValueError(
                f"unknown allocation strategy {self.strategy!r}; known: {', '.join(sorted(ALLOCATORS))}"
            )
        if self.top_m < 1:
            raise ValueError(f"AllocationConfig.top_m must be >= 1, got {self.top_m!r}")
        if self.min_gain is not None and not 0.0 <= self.min_gain <= 1.0:
            raise ValueError(f"AllocationConfig.min_gain must be None or in [0, 1], got {self.min_gain!r}")


@register_allocator("top_m")
def top_m(masses: Sequence[float], budget: int, config: AllocationConfig) -> list[int]:
    k = min(config.top_m, len(masses))
    base, extra = divmod(budget, k)
    return [base + (i < extra) if i < k else 0 for i in range(len(masses))]


@register_allocator("proportional")
def proportional(masses: Sequence[float], budget: int, config: AllocationConfig) -> list[int]:
    total = math.fsum(masses)
    quotas = [budget * m / total for m in masses]
    counts = [math.floor(q) for q in quotas]
    by_remainder = sorted(range(len(masses)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in by_remainder[: budget - sum(counts)]:
        counts[i] += 1
    return counts


@dataclass(frozen=True)
class Unresponsive:
    """An expert whose last demos were not followed by the gain `min_gain` asks for."""

    expert: str
    round: int  # the round whose demos it got last
    gains: tuple[tuple[str, float, float], ...]  # each pair those demos went to: imagined success then, now

    def __str__(self) -> str:
        gains = ", ".join(f"{pair} {then:.0%} -> {now:.0%}" for pair, then, now in self.gains)
        return f"{self.expert} (demos in round {self.round}: {gains})"


def unresponsive_experts(
    rounds: Sequence[tuple[Diagnosis, Collection[str]]], now: Diagnosis, min_gain: float
) -> tuple[Unresponsive, ...]:
    """The experts that got demos in one of `rounds` (each: that round's diagnosis, and the pairs, as
    str(pair), it gave demos to) and none of whose pairs that got them in the last such round has
    since (in `now`) gained `min_gain` of imagined success when reached. Pairs not reached then or now
    are not judged; an expert with none left is not either.

    The verdict is the expert's, not one pair's: one adapter update serves every pair of the skill, so
    a sibling pair's demos go through the update that did not take. Imagination replays the same
    initial states and world seeds every round, so an expert that did not change scores the same: a
    gain is the update's, not the draw's.
    """
    last: dict[str, int] = {}
    for k, (diagnosis, given) in enumerate(rounds):
        for p in diagnosis.pairs:
            if str(p.pair) in given:
                last[p.pair.expert] = k
    found = []
    for expert, k in sorted(last.items()):
        diagnosis, given = rounds[k]
        gains = []
        for then in diagnosis.pairs:
            later = now.get(then.pair)
            if then.pair.expert != expert or str(then.pair) not in given or later is None:
                continue
            if then.success_rate is not None and later.success_rate is not None:
                gains.append((str(then.pair), then.success_rate, later.success_rate))
        if gains and all(after < before + min_gain for _, before, after in gains):
            found.append(Unresponsive(expert, k, tuple(gains)))
    return tuple(found)


@dataclass(frozen=True)
class InitialStateRef:
    """One initial state a demo should start from."""

    composition: str  # the composition whose initial-state set it belongs to
    subtask_index: int  # the pair's subtask in that composition
    initial_state_id: int
    seed: int

    def to_dict(self) -> dict:
        return {
            "composition": self.composition,
            "subtask_index": self.subtask_index,
            "initial_state_id": self.initial_state_id,
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, d: dict) -> InitialStateRef:
        return cls(d["composition"], int(d["subtask_index"]), int(d["initial_state_id"]), int(d["seed"]))


@dataclass(frozen=True)
class DemoAllocation:
    pair: Pair
    n_demos: int
    mass: float  # the pair's first-timeout mass (why it was chosen)
    initial_states: tuple[InitialStateRef, ...]  # n_demos entries: the failure sites, cycled


@dataclass(frozen=True)
class Allocation:
    strategy: str
    budget: int
    demos: tuple[DemoAllocation, ...]  # pairs with >= 1 demo, best rank first
    note: str  # one line for the report: what was decided and why
    set_aside: tuple[str, ...] = ()  # experts whose eligible pairs were left out (Unresponsive, as text)

    @property
    def total(self) -> int:
        return sum(d.n_demos for d in self.demos)

    def to_dict(self) -> dict:
        return {
            "strategy": self.strategy,
            "budget": self.budget,
            "note": self.note,
            "set_aside": list(self.set_aside),
            "demos": [
                {
                    "pair": str(d.pair),
                    "expert": d.pair.expert,
                    "n_demos": d.n_demos,
                    "mass": d.mass,
                    "initial_states": [s.to_dict() for s in d.initial_states],
                }
                for d in self.demos
            ],
        }


def allocate(
    diagnosis: Diagnosis,
    budget: int,
    config: AllocationConfig | None = None,
    unresponsive: Sequence[Unresponsive] = (),
) -> Allocation:
    """Split `budget` demos over the eligible pairs of `diagnosis` with the configured strategy,
    leaving out those of `unresponsive` experts unless no other pair is eligible."""
    config = config or AllocationConfig()
    if budget < 0:
        raise ValueError(f"demo budget must be >= 0, got {budget!r}")
    candidates = diagnosis.eligible()
    if not candidates:
        note = (
            f"no demos requested: no pair reached by >= {diagnosis.config.min_reach} valid trials "
            "has a first timeout"
        )
        return Allocation(config.strategy, budget, (), note)
    if budget == 0:
        return Allocation(config.strategy, budget, (), "no demos requested: the demo budget is spent")
    aside = {u.expert for u in unresponsive}
    kept = [p for p in candidates if p.pair.expert not in aside]
    set_aside: tuple[str, ...] = ()
    if kept:  # otherwise every eligible pair's expert is unresponsive: the budget goes to them anyway
        candidates, set_aside = kept, tuple(str(u) for u in unresponsive)
    counts = ALLOCATORS[config.strategy]([p.mass for p in candidates], budget, config)
    if sum(counts) != budget or min(counts) < 0:
        raise RuntimeError(
            f"allocation strategy {config.strategy!r} returned {counts} for a budget of {budget}"
        )
    demos = []
    for pair, n in zip(candidates, counts, strict=True):
        if n == 0:
            continue
        refs = [
            InitialStateRef(s.composition, s.subtask_index, s.initial_state_id, s.seed) for s in pair.sites
        ]
        demos.append(DemoAllocation(pair.pair, n, pair.mass, tuple(islice(cycle(refs), n))))
    note = (
        f"{config.strategy}: {budget} demos to {len(demos)} of {len(candidates)} eligible pairs "
        f"({', '.join(f'{d.pair} x{d.n_demos}' for d in demos)})"
    )
    if set_aside:
        note += f"; set aside, no gain after their demos: {'; '.join(set_aside)}"
    elif unresponsive:
        note += "; every eligible pair's expert was unresponsive, so none was set aside"
    return Allocation(config.strategy, budget, tuple(demos), note, set_aside)
