"""The skill library: what each skill means (progress, success) and how a person would do it.

A skill is registered by name (`@register_skill`) and serves every subtask with that name, on both
arms. Each one has
  * `progress(subtask, ref, state) -> [0, 1]`: ground truth from privileged state, measured against
    `ref`, the state when the subtask became active, so it is 0 at its start and 1 exactly when
    `success` holds (it is capped at PROGRESS_CAP before that);
  * `success(subtask, ref, state) -> bool`;
  * `script(ctx)`: a generator of Cartesian waypoints, the plan a teleoperator follows. It reads
    the state again between waypoints, so it corrects for what actually happened (a cube that slid,
    a drawer that did not open fully). The scripted operator turns waypoints into joint commands.

Nothing here imports the simulator: the functions work on the dict `SimScene.privileged_state()`
returns, which keeps the labels reusable for any backend that can fill that dict.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from robocoach_skills.composition import Subtask
from robocoach_skills.sim.geometry import obstacles, push_via_point, segment_clear
from robocoach_skills.sim.layout import BUTTONS, CUBES, PLACE_TARGETS, PUSH_TARGETS

PROGRESS_CAP = 0.99  # progress stays below 1 until the success predicate holds
MIN_REFERENCE_DISTANCE = 1e-3  # [m] guards progress ratios against a zero starting distance


@dataclass(frozen=True)
class SkillThresholds:
    """Success criteria shared by both arms."""

    lift_height: float = 0.05  # pick: the grasped cube rose this far above where it started [m]
    settle_speed: float = 0.05  # place/push: the cube moves slower than this [m/s]
    drawer_open_fraction: float = 0.65  # open_drawer: slide beyond this fraction of its travel
    drawer_closed: float = 0.01  # close_drawer: slide below this [m]
    on_table_factor: float = 1.5  # a cube rests on the table if its centre is below this x half edge


THRESHOLDS = SkillThresholds()


# Straight at the goal first, then turned by +-30, +-60, +-90 deg (to free a cube from a corner).
DETOUR_TURNS = tuple(math.radians(a) for a in (0, 30, -30, 60, -60, 90, -90))


@dataclass(frozen=True)
class ScriptParams:
    """How the scripted operator moves (heights and distances, metres)."""

    hover_range: tuple[float, float] = (0.05, 0.09)  # approach height above an object's top
    lift: float = 0.09  # pick lifts the cube this far
    grasp_margins: tuple[float, ...] = (0.025, 0.012)  # opening beyond the cube width, wide first [m]
    min_finger_overlap: float = 0.014  # a grasp keeps at least this much finger length on the cube
    grasp_height_step: float = 0.0025  # raise a blocked grasp in these increments
    close_dwell: int = 5  # policy steps to let the fingers close
    open_dwell: int = 4  # policy steps to let the fingers open
    # Policy steps a pick holds the lifted cube, as an operator checks the grasp. Every other skill ends
    # with a retreat in which its subtask stays done (7-29 frames); a pick ended 4-7 frames after the
    # cube rose high enough, too few for a completion detector to learn "picked" (docs/benchmarks.md).
    lift_dwell: int = 8
    carry_margin: float = 0.03  # a carried cube's bottom clears obstacles by this
    release_drop: float = 0.01  # a placed cube is released this far above its support
    retreat: float = 0.06  # upward retreat after releasing a cube
    push_segment: float = 0.06  # a push moves the cube at most this far before re-planning
    push_clearance: float = 0.015  # gap left behind the cube before a push stroke
    push_goal_radius_factor: float = 0.4  # pushing stops within this x pad half size of its centre
    max_push_strokes: int = 12
    push_realign: float = 0.02  # re-approach from above if the pusher is this far off its line
    push_detour_turns: tuple[float, ...] = DETOUR_TURNS  # push directions tried, in order [rad]
    push_detour_stroke: float = 0.04  # length of a stroke in a turned direction
    hook_clear: float = 0.07  # height above the handle from which the hand comes down
    drawer_overshoot: tuple[float, float] = (1.15, 1.35)  # pull to this x the open threshold
    close_overshoot: float = 0.004  # push the drawer this far past closed (it stops at its limit)
    # Aim this fraction of the cap's travel deep, past its stop (which holds the hand): a policy imitating
    # such presses still passes the pressed depth (scene.BUTTON_PRESSED_FRACTION) when it stops a few
    # millimetres short, where one imitating presses aimed at 0.9 of the travel often does not.
    press_depth_fraction: float = 1.15
    press_hover: float = 0.06  # come down onto a button from this height above it
    # Leave a pressed button to this height above it, not back to `press_hover`: the cap springs back,
    # so at the approach pose only its lamp (a few pixels) tells "about to press" from "just pressed";
    # a distinct pose tells it through the joints too.
    press_retreat: float = 0.12


@dataclass(frozen=True)
class Waypoint:
    """A Cartesian set-point for the tool centre point (TCP) with the gripper pointing down."""

    pos: np.ndarray  # (3,) TCP target in the world frame [m]
    yaw: float  # direction of the finger closing axis in the table plane [rad]
    grip: float  # gripper command, 0 = closed .. 1 = open
    speed: float = 1.0  # multiplies the operator's current hand speed
    tol: float = 0.006  # reached when the measured TCP is this close [m]
    dwell: int = 0  # extra policy steps to hold once reached (e.g. let the fingers close)
    lift_over: bool = True  # the hand may be raised over obstacles on the way (not for contact strokes)


@dataclass
class ScriptContext:
    """What a skill script may use: the subtask, a live view of the state, and the operator's habits."""

    subtask: Subtask
    state: Callable[[], dict]  # fresh privileged state each call
    rng: np.random.Generator  # the operator's variability
    natural_yaw: Callable[[np.ndarray], float]  # closing-axis yaw the wrist has untwisted above a point
    stroke: float  # gripper stroke [m]
    finger_thickness: float  # [m]
    finger_width: float  # [m]
    tip_margin: float  # fingertips are this far below the TCP [m]
    palm_length: float  # palm extent along the closing axis [m]
    palm_width: float  # palm extent across the closing axis [m]
    palm_above_tcp: float  # height of the palm's underside above the TCP [m]
    params: ScriptParams = field(default_factory=ScriptParams)


# ------------------------------------------------------------------------------ helpers
def wrap_angle(a: float) -> float:
    return (a + math.pi) % (2 * math.pi) - math.pi


def nearest_yaw(base: float, symmetry: float, reference: float) -> float:
    """Among base + k * symmetry, the angle closest to `reference`, expressed next to it."""
    offset = wrap_angle(base - reference)
    offset -= symmetry * round(offset / symmetry)
    return reference + offset


def _ratio_done(ref_distance: float, distance: float) -> float:
    """Fraction of a starting distance covered: 0 at the start, 1 at zero distance."""
    return float(np.clip((ref_distance - distance) / max(ref_distance, MIN_REFERENCE_DISTANCE), 0.0, 1.0))


def _finish(raw: float, success: bool) -> float:
    return 1.0 if success else float(np.clip(raw, 0.0, PROGRESS_CAP))


def _at(xy, z: float) -> np.ndarray:
    """The point above `xy` (any 2+ vector) at height z."""
    return np.array([xy[0], xy[1], z], dtype=np.float64)


def _above(point: np.ndarray, dz: float) -> np.ndarray:
    return _at(point, point[2] + dz)


def place_goal(target: str, state: dict) -> np.ndarray:
    """Where a cube's centre should come to rest when placed in `target`."""
    ch = state["cube_half"]
    if target == "bin":
        b = state["bin"]
        return b["pos"] + np.array([0.0, 0.0, b["wall"] + ch])
    if target == "pad":
        return state["pad"]["pos"] + np.array([0.0, 0.0, ch])
    if target == "drawer":
        dr = state["drawer"]
        floor = dr["interior_floor"]
        inner_x = floor[0] - dr["interior_half"][0]  # the front panel's inner face
        # Centre of the part of the drawer that sticks out of the housing (where a cube can go in).
        x = np.clip(
            (inner_x + dr["housing_front_x"]) / 2, inner_x + ch, inner_x + 2 * dr["interior_half"][0] - ch
        )
        return np.array([x, floor[1], floor[2] + ch])
    raise ValueError(f"unknown place target {target!r}; known: {', '.join(PLACE_TARGETS)}")


def inside_target(target: str, state: dict, p: np.ndarray) -> bool:
    """Whether a cube centre `p` lies within `target`'s region."""
    ch = state["cube_half"]
    if target == "bin":
        b = state["bin"]
        return bool(np.all(np.abs(p[:2] - b["pos"][:2]) <= b["inner_half"]) and p[2] < b["height"])
    if target == "pad":
        pad = state["pad"]
        on_table = p[2] < THRESHOLDS.on_table_factor * ch
        return bool(np.all(np.abs(p[:2] - pad["pos"][:2]) <= pad["half"]) and on_table)
    if target == "drawer":
        dr = state["drawer"]
        floor, (ix, iy) = dr["interior_floor"], dr["interior_half"]
        return bool(
            abs(p[0] - floor[0]) <= ix and abs(p[1] - floor[1]) <= iy and floor[2] < p[2] < dr["wall_top"]
        )
    raise ValueError(f"unknown target {target!r}")


def _released_and_still(cube: dict) -> bool:
    return cube["touching"] == 0 and cube["speed"] < THRESHOLDS.settle_speed


def hand_collisions(
    ctx: ScriptContext,
    state: dict,
    tcp: np.ndarray,
    yaw: float,
    opening: float,
    ignore: str = "",
    margin: float = 0.005,
) -> int:
    """How many sample points of the hand at `tcp` / `yaw` would be inside an obstacle: both
    fingers (at `opening` [m]) and the palm, whose long side runs along the closing axis. Each
    point stands for a disc as wide as the part it samples. `ignore` names the object the hand
    is meant to touch."""
    axis = np.array([math.cos(yaw), math.sin(yaw)])
    finger_reach = opening / 2 + ctx.finger_thickness / 2
    finger = ctx.finger_width / 2 + margin
    points = [(tcp[:2] + sign * finger_reach * axis, tcp[2] - ctx.tip_margin, finger) for sign in (1.0, -1.0)]
    palm_bottom, palm = tcp[2] + ctx.palm_above_tcp, ctx.palm_width / 2 + margin
    half = ctx.palm_length / 2 - ctx.palm_width / 2
    points += [(tcp[:2] + s * axis, palm_bottom, palm) for s in np.linspace(-half, half, 5)]
    hits = 0
    for o in obstacles(state):
        if o.name != ignore:
            hits += sum(o.contains(xy, radius) and o.top + margin > bottom for xy, bottom, radius in points)
    return hits


COLLISION_COST = 10.0  # one colliding hand point outweighs any wrist twist [rad]


@dataclass(frozen=True)
class GraspPlan:
    yaw: float  # closing-axis direction [rad]
    height: float  # TCP height at the grasp [m]
    grip: float  # gripper command while approaching, 0..1


def grasp_pose(ctx: ScriptContext, state: dict, cube_name: str) -> GraspPlan:
    """A top grasp the way a careful person picks one: closing axis on the cube's faces, wrist
    twisted as little as possible, hand clear of obstacles. Where the hand would hit something
    next to the cube (a bin wall), the gripper opens less and/or the grasp moves up the cube,
    keeping at least `min_finger_overlap` of finger on it."""
    p, cube = ctx.params, state["objects"][cube_name]
    natural = ctx.natural_yaw(cube["pos"])
    yaws = [nearest_yaw(cube["yaw"] + k * math.pi / 2, 2 * math.pi, natural) for k in range(4)]
    top = cube["pos"][2] + state["cube_half"]
    highest = max(cube["pos"][2], top + ctx.tip_margin - p.min_finger_overlap)
    heights = np.arange(cube["pos"][2], highest + 1e-9, p.grasp_height_step)
    best, best_cost = GraspPlan(yaws[0], float(cube["pos"][2]), 1.0), math.inf
    for margin in p.grasp_margins:
        opening = min(ctx.stroke, 2 * state["cube_half"] + margin)
        for z in heights:
            for yaw in yaws:
                hits = hand_collisions(ctx, state, _at(cube["pos"], z), yaw, opening, ignore=cube_name)
                cost = abs(yaw - natural) + COLLISION_COST * hits
                if cost < best_cost:
                    best, best_cost = GraspPlan(yaw, float(z), opening / ctx.stroke), cost
            if best_cost < COLLISION_COST:  # clear: the widest opening, then the lowest grasp wins
                return best
    return best


def free_yaw(
    ctx: ScriptContext, state: dict, poses: list[np.ndarray], preferred: float, ignore: str, steps: int = 6
) -> float:
    """Yaw near `preferred` (within +-90 deg, in 15 deg steps) that keeps the closed hand clear of
    obstacles at every TCP pose in `poses`, e.g. for pressing or pushing."""

    def cost(yaw: float) -> float:
        hits = sum(hand_collisions(ctx, state, pose, yaw, 0.0, ignore=ignore) for pose in poses)
        return abs(yaw - preferred) + COLLISION_COST * hits

    return min((preferred + k * math.pi / (2 * steps) for k in range(-steps, steps + 1)), key=cost)


# ------------------------------------------------------------------------------ registry
class Skill(ABC):
    """One reusable behaviour; subclasses are registered singletons."""

    name: str = ""

    @abstractmethod
    def validate(self, subtask: Subtask) -> None:
        """Raise ValueError if `subtask` names objects this skill cannot act on."""

    @abstractmethod
    def progress(self, subtask: Subtask, ref: dict, state: dict) -> float: ...

    @abstractmethod
    def success(self, subtask: Subtask, ref: dict, state: dict) -> bool: ...

    @abstractmethod
    def script(self, ctx: ScriptContext) -> Iterator[Waypoint]: ...


SKILLS: dict[str, Skill] = {}


def register_skill(cls: type[Skill]) -> type[Skill]:
    if not cls.name or cls.name in SKILLS:
        raise ValueError(f"skill name {cls.name!r} is empty or already registered")
    SKILLS[cls.name] = cls()
    return cls


def get_skill(name: str) -> Skill:
    try:
        return SKILLS[name]
    except KeyError:
        raise ValueError(f"unknown skill {name!r}; known skills: {', '.join(sorted(SKILLS))}") from None


def skill_names() -> tuple[str, ...]:
    return tuple(SKILLS)


def validate_subtask(subtask: Subtask) -> None:
    get_skill(subtask.skill).validate(subtask)


def _require(value: str, allowed: tuple[str, ...], what: str, subtask: Subtask) -> None:
    if value not in allowed:
        raise ValueError(f"{subtask}: {what} {value!r} is not one of {', '.join(allowed)}")


# ------------------------------------------------------------------------------ skills
@register_skill
class Pick(Skill):
    """Grasp a cube from the top and lift it."""

    name = "pick"

    def validate(self, subtask: Subtask) -> None:
        _require(subtask.object, CUBES, "object", subtask)

    def success(self, subtask: Subtask, ref: dict, state: dict) -> bool:
        cube, start = state["objects"][subtask.object], ref["objects"][subtask.object]
        return cube["grasped"] and cube["pos"][2] >= start["pos"][2] + THRESHOLDS.lift_height

    def progress(self, subtask: Subtask, ref: dict, state: dict) -> float:
        cube, start = state["objects"][subtask.object], ref["objects"][subtask.object]
        reach = _ratio_done(
            np.linalg.norm(ref["ee_pos"] - start["pos"]), np.linalg.norm(state["ee_pos"] - cube["pos"])
        )
        lift = (
            np.clip((cube["pos"][2] - start["pos"][2]) / THRESHOLDS.lift_height, 0, 1)
            if cube["grasped"]
            else 0
        )
        return _finish(0.5 * reach + 0.5 * lift, self.success(subtask, ref, state))

    def script(self, ctx: ScriptContext) -> Iterator[Waypoint]:
        p, name = ctx.params, ctx.subtask.object
        state = ctx.state()
        plan = grasp_pose(ctx, state, name)
        hover = state["cube_half"] + ctx.rng.uniform(*p.hover_range)
        yield Waypoint(_above(state["objects"][name]["pos"], hover), plan.yaw, plan.grip)
        state = ctx.state()  # look again before committing
        cube = state["objects"][name]
        plan = grasp_pose(ctx, state, name)
        yield Waypoint(_above(cube["pos"], hover), plan.yaw, plan.grip, tol=0.004)
        yield Waypoint(_at(cube["pos"], plan.height), plan.yaw, plan.grip, speed=0.5, tol=0.004)
        yield Waypoint(_at(cube["pos"], plan.height), plan.yaw, 0.0, dwell=p.close_dwell)
        yield Waypoint(_above(cube["pos"], p.lift), plan.yaw, 0.0, speed=0.6, dwell=p.lift_dwell)


@register_skill
class Place(Skill):
    """Carry a grasped cube to the bin, the open drawer or the pad, and let go."""

    name = "place"

    def validate(self, subtask: Subtask) -> None:
        _require(subtask.object, CUBES, "object", subtask)
        _require(subtask.target, PLACE_TARGETS, "target", subtask)

    def success(self, subtask: Subtask, ref: dict, state: dict) -> bool:
        cube = state["objects"][subtask.object]
        return inside_target(subtask.target, state, cube["pos"]) and _released_and_still(cube)

    def progress(self, subtask: Subtask, ref: dict, state: dict) -> float:
        start, cube = ref["objects"][subtask.object]["pos"], state["objects"][subtask.object]["pos"]
        raw = _ratio_done(
            np.linalg.norm(start - place_goal(subtask.target, ref)),
            np.linalg.norm(cube - place_goal(subtask.target, state)),
        )
        return _finish(raw, self.success(subtask, ref, state))

    @staticmethod
    def _clearance_top(target: str, state: dict) -> float:
        """Highest obstacle on the way into `target`."""
        if target == "bin":
            return state["bin"]["height"]
        if target == "drawer":
            return state["drawer"]["housing_top"]
        return 2 * state["cube_half"]  # the pad: other cubes on the table

    @staticmethod
    def _release_height(target: str, state: dict, drop: float) -> float:
        """Height of the cube's centre when it is let go."""
        ch = state["cube_half"]
        if target == "bin":
            return state["bin"]["height"] + ch + drop
        if target == "drawer":
            return state["drawer"]["wall_top"] + ch + drop
        return ch + drop

    def script(self, ctx: ScriptContext) -> Iterator[Waypoint]:
        p, name, target = ctx.params, ctx.subtask.object, ctx.subtask.target
        state = ctx.state()
        if not state["objects"][name]["grasped"]:  # dropped or never held: grasp it again first
            yield from SKILLS["pick"].script(ctx)
            state = ctx.state()
            if not state["objects"][name]["grasped"]:
                return
        ch, ee = state["cube_half"], state["ee_pos"]
        below = ee[2] - state["objects"][name]["pos"][2]  # how far the cube centre hangs below the TCP
        goal = place_goal(target, state)
        yaw = state["ee_yaw"]
        if target == "drawer":  # fingers across the drawer so they fit in its open part
            yaw = nearest_yaw(math.pi / 2, math.pi, yaw)
        carry = max(ee[2], self._clearance_top(target, state) + ch + p.carry_margin + below)
        release = self._release_height(target, state, p.release_drop) + below
        yield Waypoint(_at(ee, carry), state["ee_yaw"], 0.0)
        yield Waypoint(_at(goal, carry), yaw, 0.0)
        yield Waypoint(_at(goal, release), yaw, 0.0, speed=0.5, tol=0.005)
        yield Waypoint(_at(goal, release), yaw, 1.0, dwell=p.open_dwell)
        yield Waypoint(_at(goal, release + p.retreat), yaw, 1.0)


def _on_push_line(
    ee: np.ndarray, cube: np.ndarray, u: np.ndarray, behind: float, push_z: float, tol: float
) -> bool:
    """Whether the pusher can stroke on from where it is: low, on the line through the cube along `u`
    (within `tol` sideways) and behind the cube, at most `behind` + `tol` back.

    A stroke ends with the fingers against the cube, closer than the approach point `behind`; asking
    for that point instead sent the hand up and round again after almost every stroke (5 of 5.6
    strokes per demo), a lift-and-realign mode that chunk regression averages with the stroke."""
    rel = cube - ee[:2]
    along = float(rel @ u)
    sideways = abs(float(rel[0] * u[1] - rel[1] * u[0]))
    return ee[2] <= push_z + tol and sideways <= tol and 0.0 < along <= behind + tol


@register_skill
class Push(Skill):
    """Push a cube across the table onto the pad with the closed fingers."""

    name = "push"

    def validate(self, subtask: Subtask) -> None:
        _require(subtask.object, CUBES, "object", subtask)
        _require(subtask.target, PUSH_TARGETS, "target", subtask)

    def success(self, subtask: Subtask, ref: dict, state: dict) -> bool:
        cube = state["objects"][subtask.object]
        return inside_target(subtask.target, state, cube["pos"]) and not cube["grasped"]

    def progress(self, subtask: Subtask, ref: dict, state: dict) -> float:
        goal_ref, goal = ref["pad"]["pos"][:2], state["pad"]["pos"][:2]
        raw = _ratio_done(
            np.linalg.norm(ref["objects"][subtask.object]["pos"][:2] - goal_ref),
            np.linalg.norm(state["objects"][subtask.object]["pos"][:2] - goal),
        )
        return _finish(raw, self.success(subtask, ref, state))

    @staticmethod
    def _plan_stroke(
        ctx: ScriptContext, state: dict, name: str, goal: np.ndarray, yaw: float | None
    ) -> tuple:
        """Next push stroke towards `goal`: (pusher start xy, pusher end xy, TCP height, yaw, re-approach?).

        The direct direction is preferred; if the hand cannot stand behind the cube there (a bin
        corner in the way) or the cube would run into the bin, a short stroke in a turned direction
        frees it first, as a person would nudge a cube out of a corner."""
        p, ch = ctx.params, state["cube_half"]
        cube, ee = state["objects"][name]["pos"], state["ee_pos"]
        reach = max(ctx.finger_width / 2, ctx.finger_thickness)  # closed fingers' extent ahead of the TCP
        push_z = cube[2] + ctx.tip_margin - 0.5 * ch
        # TCP distance behind the cube's centre where a stroke starts (turned cube's corner, fingers, gap)
        standoff = ch * math.sqrt(2) + reach + p.push_clearance
        to_goal = goal - cube[:2]
        dist = float(np.linalg.norm(to_goal))
        heading = math.atan2(to_goal[1], to_goal[0])
        b = state["bin"]
        keep_out = b["inner_half"] + b["wall"] + ch + 0.002
        first = None
        for turn in p.push_detour_turns:
            u = np.array([math.cos(heading + turn), math.sin(heading + turn)])
            stroke = min(dist, p.push_segment) if turn == 0 else p.push_detour_stroke
            behind = cube[:2] - u * standoff
            end = cube[:2] + u * (stroke - ch - reach)
            realign = not _on_push_line(ee, cube[:2], u, standoff, push_z, p.push_realign)
            stroke_yaw = yaw
            if stroke_yaw is None or realign:  # choose an orientation whose palm stays clear
                lane = nearest_yaw(math.atan2(u[1], u[0]), math.pi, ctx.natural_yaw(cube))
                stroke_yaw = free_yaw(ctx, state, [_at(behind, push_z), _at(end, push_z)], lane, ignore=name)
            plan = (behind, end, push_z, stroke_yaw, realign)
            first = first or plan
            hits = sum(
                hand_collisions(ctx, state, _at(xy, push_z), stroke_yaw, 0.0, ignore=name)
                for xy in (behind, end)
            )
            if hits == 0 and segment_clear(cube[:2], cube[:2] + u * stroke, b["pos"][:2], keep_out):
                return plan
        return first

    def script(self, ctx: ScriptContext) -> Iterator[Waypoint]:
        p, name = ctx.params, ctx.subtask.object
        state = ctx.state()
        safe = 2 * state["cube_half"] + p.carry_margin + ctx.tip_margin
        pad = state["pad"]["pos"][:2]
        stop_radius = p.push_goal_radius_factor * state["pad"]["half"]
        yaw = None
        for _ in range(p.max_push_strokes):
            state = ctx.state()
            cube, ee = state["objects"][name]["pos"][:2], state["ee_pos"]
            via = push_via_point(state, cube, pad)  # round the bin if it is in the way
            if via is None and np.linalg.norm(pad - cube) < stop_radius:
                break
            behind, end, push_z, yaw, realign = self._plan_stroke(
                ctx, state, name, pad if via is None else via, yaw
            )
            if realign:
                yield Waypoint(_at(ee, max(ee[2], safe)), yaw, 0.0)
                yield Waypoint(_at(behind, safe), yaw, 0.0)
                yield Waypoint(_at(behind, push_z), yaw, 0.0, speed=0.6, tol=0.005)
            yield Waypoint(_at(end, push_z), yaw, 0.0, speed=0.5, lift_over=False)
        ee = ctx.state()["ee_pos"]
        yield Waypoint(_at(ee, max(ee[2], safe)), yaw if yaw is not None else ctx.state()["ee_yaw"], 0.0)


def _drawer_open_threshold(state: dict) -> float:
    return THRESHOLDS.drawer_open_fraction * state["drawer"]["travel"]


def _handle_yaw(ctx: ScriptContext, handle: np.ndarray) -> float:
    """Closing axis along the handle bar (world y), so the closed fingers are thin along the pull."""
    return nearest_yaw(math.pi / 2, math.pi, ctx.natural_yaw(handle))


@register_skill
class OpenDrawer(Skill):
    """Hook the closed fingers behind the handle and pull the drawer open."""

    name = "open_drawer"

    def validate(self, subtask: Subtask) -> None:
        _require(subtask.object or "drawer", ("drawer",), "object", subtask)

    def success(self, subtask: Subtask, ref: dict, state: dict) -> bool:
        return state["drawer"]["opening"] >= _drawer_open_threshold(state)

    def progress(self, subtask: Subtask, ref: dict, state: dict) -> float:
        start, goal = ref["drawer"]["opening"], _drawer_open_threshold(state)
        raw = (state["drawer"]["opening"] - start) / max(goal - start, MIN_REFERENCE_DISTANCE)
        return _finish(raw, self.success(subtask, ref, state))

    def script(self, ctx: ScriptContext) -> Iterator[Waypoint]:
        p = ctx.params
        dr = ctx.state()["drawer"]
        h = dr["handle_pos"]
        yaw = _handle_yaw(ctx, h)
        gap_x = h[0] + (dr["handle_radius"] + dr["handle_standoff"]) / 2  # between bar and front panel
        yield Waypoint(np.array([gap_x, h[1], h[2] + p.hook_clear]), yaw, 0.0)
        yield Waypoint(np.array([gap_x, h[1], h[2]]), yaw, 0.0, speed=0.5, tol=0.004)
        want = min(
            ctx.rng.uniform(*p.drawer_overshoot) * _drawer_open_threshold(ctx.state()), dr["travel"] - 0.005
        )
        pull = max(want - dr["opening"], 0.0)
        yield Waypoint(np.array([gap_x - pull, h[1], h[2]]), yaw, 0.0, speed=0.5, lift_over=False)
        yield Waypoint(np.array([gap_x - pull, h[1], h[2] + p.hook_clear]), yaw, 0.0)


@register_skill
class CloseDrawer(Skill):
    """Push the drawer shut by the handle."""

    name = "close_drawer"

    def validate(self, subtask: Subtask) -> None:
        _require(subtask.object or "drawer", ("drawer",), "object", subtask)

    def success(self, subtask: Subtask, ref: dict, state: dict) -> bool:
        return state["drawer"]["opening"] <= THRESHOLDS.drawer_closed

    def progress(self, subtask: Subtask, ref: dict, state: dict) -> float:
        start = ref["drawer"]["opening"]
        raw = (start - state["drawer"]["opening"]) / max(
            start - THRESHOLDS.drawer_closed, MIN_REFERENCE_DISTANCE
        )
        return _finish(raw, self.success(subtask, ref, state))

    def script(self, ctx: ScriptContext) -> Iterator[Waypoint]:
        p = ctx.params
        dr = ctx.state()["drawer"]
        h = dr["handle_pos"]
        yaw = _handle_yaw(ctx, h)
        face = dr["handle_radius"] + ctx.finger_width / 2  # TCP to the bar's axis when touching it
        start_x = h[0] - face - 0.02
        closed_x = h[0] + dr["opening"] - face + p.close_overshoot
        yield Waypoint(np.array([start_x, h[1], h[2] + p.hook_clear]), yaw, 0.0)
        yield Waypoint(np.array([start_x, h[1], h[2]]), yaw, 0.0, speed=0.6, tol=0.005)
        yield Waypoint(np.array([closed_x, h[1], h[2]]), yaw, 0.0, speed=0.5, lift_over=False)
        yield Waypoint(np.array([closed_x - 0.02, h[1], h[2]]), yaw, 0.0)
        yield Waypoint(np.array([closed_x - 0.02, h[1], h[2] + p.hook_clear]), yaw, 0.0)


@register_skill
class PressButton(Skill):
    """Press a spring-loaded button down with the closed fingertips."""

    name = "press_button"

    def validate(self, subtask: Subtask) -> None:
        _require(subtask.object, BUTTONS, "object", subtask)

    def success(self, subtask: Subtask, ref: dict, state: dict) -> bool:
        b = subtask.object
        return state["buttons"][b]["press_count"] > ref["buttons"][b]["press_count"]

    def progress(self, subtask: Subtask, ref: dict, state: dict) -> float:
        b = subtask.object
        top_ref, button = ref["buttons"][b]["top_pos"], state["buttons"][b]
        reach = _ratio_done(
            np.linalg.norm(ref["ee_pos"] - top_ref), np.linalg.norm(state["ee_pos"] - button["top_pos"])
        )
        depth = np.clip(button["depth"] / button["travel"], 0.0, 1.0)
        return _finish(0.5 * reach + 0.5 * depth, self.success(subtask, ref, state))

    def script(self, ctx: ScriptContext) -> Iterator[Waypoint]:
        p = ctx.params
        button = ctx.state()["buttons"][ctx.subtask.object]
        top = button["top_pos"]
        press_z = top[2] - p.press_depth_fraction * button["travel"] + ctx.tip_margin
        state = ctx.state()
        yaw = free_yaw(ctx, state, [_at(top, press_z)], ctx.natural_yaw(top), ignore=ctx.subtask.object)
        yield Waypoint(_above(top, p.press_hover), yaw, 0.0)
        yield Waypoint(_at(top, press_z), yaw, 0.0, speed=0.4, tol=0.003, dwell=2)
        yield Waypoint(_above(top, p.press_retreat), yaw, 0.0)
