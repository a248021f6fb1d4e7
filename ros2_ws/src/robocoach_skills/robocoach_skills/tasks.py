"""Task suites per arm and the seeded initial-state distribution of every composition.

Each robot gets the same suite: TRAINING compositions (2-4 subtasks) that experts are trained and
coached on, and HELD_OUT ones nothing trains on: a continuation of a training task, a chain across
two training tasks, and two reorderings of the skills of training tasks.

`sample_initial_state(composition, seed)` is the composition's initial-state distribution: cube
poses, distractors, fixture jitter, drawer state, arm start, colour and light jitter. A share of
seeds (HARD_FRACTION) is drawn from a harder region; `initial_region` names it, so evaluations can
report where failures concentrate:
  * "far_reach":  the first task cube lies near the arm's reach limit;
  * "near_bin":   the first task cube touches-close to the bin's outer wall (fingers must avoid it);
  * "clutter":    (compositions without cubes) a distractor cube stands right next to the button.

>>> [c.name for c in held_out_compositions("piper")][:2]
['pick_place_bin_then_press', 'close_then_pick_bin']
>>> initial_region(get_composition("franka", "pick_place_bin"), 7) in REGIONS
True
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.constants import ROBOTS
from robocoach_skills.sim.arms import get_arm
from robocoach_skills.sim.layout import BUTTONS, CUBES, OBJECT_RGBA, InitialState, WorkspaceLayout, get_layout
from robocoach_skills.skills import validate_subtask

S = Subtask

# name -> subtasks. The same suite serves both arms (their layouts differ, the semantics do not).
TRAINING: dict[str, tuple[Subtask, ...]] = {
    "pick_place_bin": (S("pick", "red_cube"), S("place", "red_cube", "bin")),
    "pick_place_pad": (S("pick", "green_cube"), S("place", "green_cube", "pad")),
    "drawer_store": (
        S("open_drawer", "drawer"),
        S("pick", "blue_cube"),
        S("place", "blue_cube", "drawer"),
        S("close_drawer", "drawer"),
    ),
    "press_push": (S("press_button", "red_button"), S("push", "green_cube", "pad")),
    "push_pick_bin": (S("push", "blue_cube", "pad"), S("pick", "blue_cube"), S("place", "blue_cube", "bin")),
    "button_pick_bin": (
        S("press_button", "green_button"),
        S("pick", "red_cube"),
        S("place", "red_cube", "bin"),
    ),
    "two_buttons": (S("press_button", "red_button"), S("press_button", "green_button")),
    "open_then_press": (S("open_drawer", "drawer"), S("press_button", "red_button")),
    "close_then_push": (S("close_drawer", "drawer"), S("push", "red_cube", "pad")),
}

HELD_OUT: dict[str, tuple[Subtask, ...]] = {
    # continuation: pick_place_bin, then one more step
    "pick_place_bin_then_press": (
        S("pick", "red_cube"),
        S("place", "red_cube", "bin"),
        S("press_button", "green_button"),
    ),
    # cross-task chain: the head of close_then_push joined to the body of pick_place_pad/bin
    "close_then_pick_bin": (
        S("close_drawer", "drawer"),
        S("pick", "green_cube"),
        S("place", "green_cube", "bin"),
    ),
    # reorderings of press_push and open_then_press
    "push_then_press": (S("push", "green_cube", "pad"), S("press_button", "red_button")),
    "press_then_open": (S("press_button", "red_button"), S("open_drawer", "drawer")),
}

HELD_OUT_KIND: dict[str, str] = {
    "pick_place_bin_then_press": "continuation",
    "close_then_pick_bin": "cross_task_chain",
    "push_then_press": "reordering",
    "press_then_open": "reordering",
}

REGIONS: tuple[str, ...] = ("easy", "far_reach", "near_bin", "clutter")


@dataclass(frozen=True)
class InitialStateParams:
    """Knobs of the initial-state distribution (shared by every composition)."""

    hard_fraction: float = 0.3  # share of seeds drawn from a hard region
    distractor_probability: float = 0.6  # each non-task cube is on the table with this probability
    min_cube_spacing: float = 0.07  # centre distance between cubes [m]
    keep_out_margin: float = 0.012  # cubes keep this far from fixtures (beyond their own size) [m]
    near_bin_gap: tuple[float, float] = (0.008, 0.02)  # "near_bin": gap to the bin's outer wall [m]
    clutter_gap: tuple[float, float] = (0.008, 0.02)  # "clutter": gap to the button's housing [m]
    arm_jitter: float = 0.03  # uniform +- jitter of each start joint angle [rad]
    colour_jitter: float = 0.06  # uniform +- jitter of each RGB channel
    light_scale: tuple[float, float] = (0.7, 1.1)  # key light intensity factor
    light_offset: float = 0.15  # uniform +- shift of the key light in x and y [m]
    drawer_start_open: tuple[float, float] = (0.75, 0.9)  # fraction of travel when it starts open
    push_lane_margin: float = 0.03  # distractors keep this far from a pushed cube's lane to the pad [m]
    max_tries: int = 500  # rejection-sampling budget per cube


PARAMS = InitialStateParams()


# ------------------------------------------------------------------------------ suites
def _build(robot: str, table: dict[str, tuple[Subtask, ...]], held_out: bool) -> list[Composition]:
    if robot not in ROBOTS:
        raise ValueError(f"unknown robot {robot!r}; known robots: {', '.join(ROBOTS)}")
    comps = []
    for name, subtasks in table.items():
        for sub in subtasks:
            validate_subtask(sub)
        comps.append(Composition(name, robot, subtasks, held_out=held_out))
    return comps


def training_compositions(robot: str) -> list[Composition]:
    return _build(robot, TRAINING, held_out=False)


def held_out_compositions(robot: str) -> list[Composition]:
    return _build(robot, HELD_OUT, held_out=True)


def task_suite(robot: str) -> list[Composition]:
    """Every composition of a robot: training first, then held-out."""
    return training_compositions(robot) + held_out_compositions(robot)


def get_composition(robot: str, name: str) -> Composition:
    for comp in task_suite(robot):
        if comp.name == name:
            return comp
    known = ", ".join(c.name for c in task_suite(robot))
    raise ValueError(f"no composition {name!r} for {robot}; known compositions: {known}")


def skill_instances(robot: str, held_out: bool = False) -> dict[str, list[tuple[Composition, int]]]:
    """skill -> every (composition, subtask index) using it, over training (and held-out) tasks."""
    comps = task_suite(robot) if held_out else training_compositions(robot)
    found: dict[str, list[tuple[Composition, int]]] = {}
    for comp in comps:
        for i, sub in enumerate(comp.subtasks):
            found.setdefault(sub.skill, []).append((comp, i))
    return found


# ------------------------------------------------------------------------------ initial states
def _task_cubes(composition: Composition) -> list[str]:
    cubes: list[str] = []
    for sub in composition.subtasks:
        if sub.object in CUBES and sub.object not in cubes:
            cubes.append(sub.object)
    return cubes


def _drawer_starts_open(composition: Composition) -> bool:
    """True if the first thing done with the drawer needs it open (closing it, placing into it)."""
    for sub in composition.subtasks:
        if sub.skill == "open_drawer":
            return False
        if sub.skill == "close_drawer" or (sub.skill == "place" and sub.target == "drawer"):
            return True
    return False


def _segment_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    ab = b - a
    t = np.clip(np.dot(p - a, ab) / max(np.dot(ab, ab), 1e-12), 0.0, 1.0)
    return float(np.linalg.norm(p - (a + t * ab)))


class _Placer:
    """Rejection sampler for cube positions that keeps clear of fixtures and of each other."""

    def __init__(self, layout: WorkspaceLayout, bin_xy, pad_xy, button_xy, rng: np.random.Generator):
        d, m = layout.dims, PARAMS.keep_out_margin
        self.rng, self.bin_xy = rng, bin_xy
        reach = d.cube_half * math.sqrt(2) + m  # a cube's half diagonal plus margin
        bin_half = d.bin_inner_half + d.bin_wall + reach
        cab_x, cab_y = layout.cabinet_xy
        hx, hy = d.housing_half
        drawer_front = cab_x - hx - d.drawer_travel - d.front_thickness - d.handle_standoff - d.handle_radius
        # Axis-aligned keep-out boxes (x_min, x_max, y_min, y_max) and discs (x, y, radius).
        pad_half = d.pad_half + reach
        self.boxes = [
            (bin_xy[0] - bin_half, bin_xy[0] + bin_half, bin_xy[1] - bin_half, bin_xy[1] + bin_half),
            (pad_xy[0] - pad_half, pad_xy[0] + pad_half, pad_xy[1] - pad_half, pad_xy[1] + pad_half),
            (drawer_front - reach, cab_x + hx + reach, cab_y - hy - reach, cab_y + hy + reach),
        ]
        self.discs = [(x, y, d.button_base_radius + reach) for x, y in button_xy.values()]
        self.corridors: list[tuple[np.ndarray, np.ndarray, float]] = []  # segments kept free (a, b, width)
        self.placed: list[np.ndarray] = []

    def clear(self, xy: np.ndarray, ignore_bin: bool = False, ignore_disc: int | None = None) -> bool:
        for k, (x0, x1, y0, y1) in enumerate(self.boxes):
            if ignore_bin and k == 0:
                continue
            if x0 <= xy[0] <= x1 and y0 <= xy[1] <= y1:
                return False
        if any(
            math.hypot(xy[0] - x, xy[1] - y) < r for k, (x, y, r) in enumerate(self.discs) if k != ignore_disc
        ):
            return False
        if any(_segment_distance(xy, a, b) < width for a, b, width in self.corridors):
            return False
        return all(np.linalg.norm(xy - other) >= PARAMS.min_cube_spacing for other in self.placed)

    def try_place(
        self, sample, ignore_bin: bool = False, ignore_disc: int | None = None
    ) -> np.ndarray | None:
        for _ in range(PARAMS.max_tries):
            xy = np.asarray(sample(), dtype=np.float64)
            if self.clear(xy, ignore_bin, ignore_disc):
                self.placed.append(xy)
                return xy
        return None

    def place(self, sample, ignore_bin: bool = False, ignore_disc: int | None = None) -> np.ndarray:
        xy = self.try_place(sample, ignore_bin, ignore_disc)
        if xy is None:
            raise RuntimeError(
                "could not place a task cube clear of the fixtures; the layout zones are too tight"
            )
        return xy

    def zone_sampler(self, zone):
        (x0, x1), (y0, y1) = zone
        return lambda: (self.rng.uniform(x0, x1), self.rng.uniform(y0, y1))

    def in_zone(self, zone) -> np.ndarray:
        return self.place(self.zone_sampler(zone))


def _composition_rng(composition: Composition, seed: int) -> np.random.Generator:
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    key = zlib.crc32(f"{composition.robot}/{composition.name}".encode())
    return np.random.default_rng([seed, key])


def _near_bin_sampler(rng: np.random.Generator, dims, bin_xy) -> Callable[[], tuple[float, float]]:
    """Spots just in front of the bin's wall that faces the cube zone (the "near_bin" region)."""
    outer, span = dims.bin_inner_half + dims.bin_wall, 0.6 * dims.bin_inner_half

    def sample() -> tuple[float, float]:
        gap = rng.uniform(*PARAMS.near_bin_gap)
        return (bin_xy[0] + rng.uniform(-span, span), bin_xy[1] - outer - dims.cube_half - gap)

    return sample


def _beside_sampler(rng: np.random.Generator, dims, centre) -> Callable[[], tuple[float, float]]:
    """Spots right next to a button's housing (the "clutter" region)."""

    def sample() -> tuple[float, float]:
        angle = rng.uniform(-math.pi, math.pi)
        r = dims.button_base_radius + dims.cube_half * math.sqrt(2) + rng.uniform(*PARAMS.clutter_gap)
        return (centre[0] + r * math.cos(angle), centre[1] + r * math.sin(angle))

    return sample


def _place_cubes(
    composition: Composition, layout: WorkspaceLayout, placer: _Placer, region: str, pad_xy, button_xy
) -> tuple[dict[str, np.ndarray], str]:
    """Positions of the cubes on the table (task cubes first, then distractors) and the region
    actually realised (a "clutter" cube that finds no room leaves an "easy" state)."""
    rng, d = placer.rng, layout.dims
    task_cubes = _task_cubes(composition)
    positions: dict[str, np.ndarray] = {}
    for k, cube in enumerate(task_cubes):
        if k == 0 and region == "far_reach":
            positions[cube] = placer.in_zone(layout.far_zone)
        elif k == 0 and region == "near_bin":
            positions[cube] = placer.place(_near_bin_sampler(rng, d, placer.bin_xy), ignore_bin=True)
        else:
            positions[cube] = placer.in_zone(layout.cube_zone)
    # Keep the way from a pushed cube to the pad free of distractors (a push needs a clear lane).
    width = 2 * d.cube_half * math.sqrt(2) + PARAMS.push_lane_margin
    for sub in composition.subtasks:
        if sub.skill == "push":
            placer.corridors.append((positions[sub.object], np.asarray(pad_xy, dtype=np.float64), width))
    distractors = [c for c in CUBES if c not in task_cubes and rng.random() < PARAMS.distractor_probability]
    if region == "clutter" and not distractors:
        distractors = [c for c in CUBES if c not in task_cubes][:1]
    for k, cube in enumerate(distractors):
        if k == 0 and region == "clutter":
            button = next(s.object for s in composition.subtasks if s.object in BUTTONS)
            sample = _beside_sampler(rng, d, button_xy[button])
            xy = placer.try_place(sample, ignore_disc=BUTTONS.index(button))
            region = region if xy is not None else "easy"
        else:
            xy = placer.try_place(placer.zone_sampler(layout.cube_zone))
        if xy is not None:  # a distractor that finds no free spot stays off the table
            positions[cube] = xy
    return positions, region


def sample_initial_state(composition: Composition, seed: int) -> InitialState:
    """The initial state the composition's distribution assigns to `seed` (deterministic)."""
    rng = _composition_rng(composition, seed)
    layout, arm = get_layout(composition.robot), get_arm(composition.robot)
    d = layout.dims

    def jitter(xy: tuple[float, float], amount: float) -> tuple[float, float]:
        return (xy[0] + rng.uniform(-amount, amount), xy[1] + rng.uniform(-amount, amount))

    bin_xy = jitter(layout.bin_xy, layout.fixture_jitter)
    pad_xy = jitter(layout.pad_xy, layout.fixture_jitter)
    button_xy = {b: jitter(layout.button_xy[b], layout.fixture_jitter) for b in BUTTONS}
    if _task_cubes(composition):
        hard_kinds = ["far_reach", "near_bin"]
    else:  # clutter goes beside the composition's button: none, no hard region
        hard_kinds = ["clutter"] if any(s.object in BUTTONS for s in composition.subtasks) else []
    hard = rng.random() < PARAMS.hard_fraction  # drawn for every composition: seeds keep their states
    region = str(rng.choice(hard_kinds)) if hard and hard_kinds else "easy"
    placer = _Placer(layout, bin_xy, pad_xy, button_xy, rng)
    positions, region = _place_cubes(composition, layout, placer, region, pad_xy, button_xy)

    cubes = {}
    for cube in CUBES:
        if cube in positions:
            x, y = positions[cube]
            cubes[cube] = (float(x), float(y), float(rng.uniform(-math.pi / 4, math.pi / 4)))
        else:
            cubes[cube] = (*layout.park_xy[cube], 0.0)
    opening = rng.uniform(*PARAMS.drawer_start_open) * d.drawer_travel
    if not _drawer_starts_open(composition):
        opening = 0.0
    arm_q = np.asarray(arm.home) + rng.uniform(-PARAMS.arm_jitter, PARAMS.arm_jitter, arm.n_joints)
    arm_q = np.clip(arm_q, arm.lower_array, arm.upper_array)
    rgba = {}
    for name, colour in OBJECT_RGBA.items():
        rgb = np.asarray(colour[:3]) + rng.uniform(-PARAMS.colour_jitter, PARAMS.colour_jitter, 3)
        rgba[name] = (*map(float, np.clip(rgb, 0.0, 1.0)), colour[3])
    light_xy = rng.uniform(-PARAMS.light_offset, PARAMS.light_offset, 2)
    return InitialState(
        cubes=cubes,
        present=tuple(c for c in CUBES if c in positions),
        bin_xy=bin_xy,
        pad_xy=pad_xy,
        button_xy=button_xy,
        drawer_opening=float(opening),
        arm_q=tuple(float(q) for q in arm_q),
        rgba=rgba,
        light_scale=float(rng.uniform(*PARAMS.light_scale)),
        light_offset=(float(light_xy[0]), float(light_xy[1]), 0.0),
        region=region,
    )


def initial_region(composition: Composition, seed: int) -> str:
    """Region label ("easy" or a hard region from REGIONS) of the seed's initial state."""
    return sample_initial_state(composition, seed).region
