"""The methods compared at a matched demo budget, as data: a policy kind, a target source, an allocation.

Every method runs on the same schedule (rounds, demos per round, update steps); only three things
differ (issue 8's list):

    name          policy          targets from      allocation
    (a) shared_uniform    shared_adapter  uniform prior     uniform
    (b) shared_targeted   shared_adapter  world model       targeted
    (c) modular_random    modular         random outcomes   targeted
    (d) robocoach         modular         world model       targeted
    (e) modular_uniform   modular         uniform prior     uniform
    (f) end_to_end        end_to_end      none              round_robin
    (g) oracle            modular         deployed (sim)    targeted

All but (f) run the `Coach` loop on subtask demos. Targets "uniform prior" and "random outcomes" run no
rollout: the port returns records that say every subtask fails first once (uniform) or that draw each
trial's first failure at random (random), so the unchanged diagnosis and allocation code turn them
into uniform or random demo targets. (f) records whole-task demos round-robin over the training
compositions, as many demo frames as its subtask-demo budget is worth (experiment.end_to_end).
"targeted" is one strategy shared by (b), (c), (d) and (g), the experiment's setting (`top_m` by
default, the paper's rule), so a change of RoboCoach's allocation reaches its ablations too.

>>> ALLOCATORS["uniform"]([0.5, 0.3, 0.2], 7, AllocationConfig())
[3, 2, 2]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from robocoach_world.coach.allocation import ALLOCATORS, AllocationConfig, register_allocator


class PolicyKind(StrEnum):
    MODULAR = "modular"  # per-skill LoRA adapters (the RoboCoach experts)
    SHARED_ADAPTER = "shared_adapter"  # one LoRA adapter shared by every skill, heads per skill
    END_TO_END = "end_to_end"  # one whole policy per composition, taught by whole-task demos


class Targets(StrEnum):
    WORLD_MODEL = "world_model"  # imagined in CoachWorld, judged by the progress judge
    DEPLOYED = "deployed"  # deployed on the simulator, judged by its ground truth (oracle)
    RANDOM = "random"  # random first failures: random targets
    UNIFORM = "uniform"  # every subtask fails first once: every pair weighted alike
    NONE = "none"  # no diagnosis: whole-task demos of every training composition in turn


@dataclass(frozen=True)
class Method:
    name: str
    letter: str  # issue 8's label
    policy: PolicyKind
    targets: Targets
    allocation: str  # TARGETED, a strategy in coach.allocation.ALLOCATORS, or (f)'s ROUND_ROBIN
    summary: str

    def strategy(self, targeted: str) -> str:
        """The allocation strategy this method runs, given the experiment's targeted one.

        >>> METHODS["robocoach"].strategy("proportional"), METHODS["modular_uniform"].strategy("proportional")
        ('proportional', 'uniform')
        """
        return targeted if self.allocation == TARGETED else self.allocation

    @property
    def blind(self) -> bool:
        """Targets that ignore how the experts fail (no rollout behind the records)."""
        return self.targets in (Targets.RANDOM, Targets.UNIFORM)

    @property
    def judges_gain(self) -> bool:
        """Sets aside unresponsive experts (`RunSettings.targeted_min_gain`): a targeted method whose
        records have rollouts behind them, where a gain after demos can be seen.

        >>> [m.letter for m in METHODS.values() if m.judges_gain]
        ['b', 'd', 'g']
        """
        return self.allocation == TARGETED and not self.blind

    def start_key(self, robot: str, seed: int) -> str:
        """Which runs start from the same policy: every modular method of an arm (the bootstrap experts,
        whatever the seed), and per seed the shared-adapter ones (fitted under that seed); (f) alone."""
        if self.policy == PolicyKind.MODULAR:
            return f"{self.policy}/{robot}"
        return f"{self.policy}/{robot}/seed{seed}"


REFERENCE = "robocoach"  # the method every other one is tested against
ROUND_ROBIN = "round_robin"  # (f)'s allocation: whole-task demo slot k goes to composition k mod n
TARGETED = "targeted"  # (b, c, d, g): the experiment's targeted strategy (RunSettings.targeted_allocation)

METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("shared_uniform", "a", PolicyKind.SHARED_ADAPTER, Targets.UNIFORM, "uniform",
               "shared adapter, uniform acquisition"),
        Method("shared_targeted", "b", PolicyKind.SHARED_ADAPTER, Targets.WORLD_MODEL, TARGETED,
               "shared adapter, world-model-targeted demos"),
        Method("modular_random", "c", PolicyKind.MODULAR, Targets.RANDOM, TARGETED,
               "modular experts, random targets"),
        Method(REFERENCE, "d", PolicyKind.MODULAR, Targets.WORLD_MODEL, TARGETED,
               "RoboCoach: modular experts, world-model-targeted demos"),
        Method("modular_uniform", "e", PolicyKind.MODULAR, Targets.UNIFORM, "uniform",
               "modular experts, uniform acquisition"),
        Method("end_to_end", "f", PolicyKind.END_TO_END, Targets.NONE, ROUND_ROBIN,
               "end-to-end policy per composition, whole-task demos at the same demo frames"),
        Method("oracle", "g", PolicyKind.MODULAR, Targets.DEPLOYED, TARGETED,
               "oracle: modular experts, targets from deployed (sim) failures"),
    )
}  # fmt: skip


def get_methods(names: Sequence[str]) -> list[Method]:
    """The named methods ([] or ["all"]: every one), in the table's order."""
    if not names or list(names) == ["all"]:
        return list(METHODS.values())
    unknown = [n for n in names if n not in METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; known: {', '.join(METHODS)}")
    return [m for m in METHODS.values() if m.name in names]


if "uniform" not in ALLOCATORS:  # importing twice (e.g. doctest and package) must not re-register

    @register_allocator("uniform")
    def uniform(masses: Sequence[float], budget: int, config: AllocationConfig) -> list[int]:
        """An equal share to every candidate pair; the remainder one each to the best-ranked."""
        base, extra = divmod(budget, len(masses))
        return [base + (i < extra) for i in range(len(masses))]
