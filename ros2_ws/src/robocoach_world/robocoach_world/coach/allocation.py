"""Improve, part 1: split a round's demo budget over the diagnosed pairs, by a registered strategy.

Strategies see only the eligible pairs' masses, highest first (`Diagnosis.eligible()`), and return
integer demo counts summing to the budget; they are chosen by name (`AllocationConfig.strategy`):

* `top_m` (default, the paper's rule): budget // M demos to each of the top M pairs; the remainder
  goes one demo each to the best-ranked of them. Fewer than M eligible pairs share the whole budget.
* `proportional`: demos proportional to mass, largest-remainder rounding (ties: better rank first).

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
from collections.abc import Callable, Sequence
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

    def __post_init__(self) -> None:
        if self.strategy not in ALLOCATORS:
            raise ValueError(
                f"unknown allocation strategy {self.strategy!r}; known: {', '.join(sorted(ALLOCATORS))}"
            )
        if self.top_m < 1:
            raise ValueError(f"AllocationConfig.top_m must be >= 1, got {self.top_m!r}")


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

    @property
    def total(self) -> int:
        return sum(d.n_demos for d in self.demos)

    def to_dict(self) -> dict:
        return {
            "strategy": self.strategy,
            "budget": self.budget,
            "note": self.note,
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


def allocate(diagnosis: Diagnosis, budget: int, config: AllocationConfig | None = None) -> Allocation:
    """Split `budget` demos over the eligible pairs of `diagnosis` with the configured strategy."""
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
    return Allocation(config.strategy, budget, tuple(demos), note)
