"""What the table looks like to a moving hand: obstacle footprints and clear paths.

Pure functions of the privileged-state dict (`SimScene.privileged_state()`), no MuJoCo: the skill
scripts and the scripted operator use them to keep the hand, and pushed cubes, off the fixtures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

HAND_MARGIN = 0.02  # an obstacle's footprint counts this far around it for a moving hand [m]
HAND_CLEARANCE = 0.025  # a hand passing over an obstacle keeps this much above its top [m]


@dataclass(frozen=True)
class Obstacle:
    """An axis-aligned box footprint on the table with a top height (what a hand must clear)."""

    name: str  # scene object it stands for
    lo: np.ndarray  # (2,) footprint minimum corner [m]
    hi: np.ndarray  # (2,) footprint maximum corner [m]
    top: float  # height of its highest point [m]

    def contains(self, xy: np.ndarray, margin: float) -> bool:
        return bool(np.all(xy >= self.lo - margin) and np.all(xy <= self.hi + margin))


def obstacles(state: dict) -> list[Obstacle]:
    """Everything on the table a moving hand could hit: bin, cabinet, drawer, buttons, free cubes."""
    found = []
    b = state["bin"]
    outer = b["inner_half"] + b["wall"]
    found.append(Obstacle("bin", b["pos"][:2] - outer, b["pos"][:2] + outer, b["height"]))
    dr = state["drawer"]
    centre, half = np.asarray(dr["housing_centre"]), np.asarray(dr["housing_half"])
    found.append(Obstacle("cabinet", centre - half, centre + half, dr["housing_top"]))
    drawer_lo = np.array([dr["outer_x"], centre[1] - half[1]])
    found.append(
        Obstacle("drawer", drawer_lo, np.array([centre[0] - half[0], centre[1] + half[1]]), dr["housing_top"])
    )
    for name, button in state["buttons"].items():
        r, top = button["base_radius"], button["top_pos"]
        found.append(Obstacle(name, top[:2] - r, top[:2] + r, float(top[2])))
    ch = state["cube_half"]
    for name, cube in state["objects"].items():
        if cube["present"] and not cube["grasped"]:
            r = ch * math.sqrt(2)
            found.append(Obstacle(name, cube["pos"][:2] - r, cube["pos"][:2] + r, float(cube["pos"][2] + ch)))
    return found


def transit_height(
    state: dict,
    start: np.ndarray,
    end: np.ndarray,
    below_tcp: float,
    margin: float = HAND_MARGIN,
    clearance: float = HAND_CLEARANCE,
    samples: int = 25,
) -> float | None:
    """Lowest TCP height at which a straight move start -> end clears every obstacle it crosses,
    or None if the straight move is already clear. Obstacles under `start` or `end` are the ones the
    hand is meant to reach (a cube to pick, a handle), so they are not counted. `below_tcp` is how
    far the hand (or a carried cube) reaches below the TCP."""
    crossed = [
        o for o in obstacles(state) if not (o.contains(start[:2], margin) or o.contains(end[:2], margin))
    ]
    needed, blocked = 0.0, False
    for t in np.linspace(0.0, 1.0, samples):
        p = start + t * (end - start)
        for o in crossed:
            if o.contains(p[:2], margin):
                needed = max(needed, o.top + clearance + below_tcp)
                blocked |= p[2] - below_tcp < o.top + clearance
    return needed if blocked else None


def escape_height(
    state: dict,
    pos: np.ndarray,
    below_tcp: float,
    margin: float = HAND_MARGIN,
    clearance: float = HAND_CLEARANCE,
) -> float | None:
    """Lowest TCP height at which a hand at `pos` is clear of every obstacle under it, or None if it
    already is. A subtask that starts where the last one completed finds the hand in the bin, on a
    pressed button or hooked behind the drawer handle; sideways from there it drags what it is in."""
    under = [o.top for o in obstacles(state) if o.contains(pos[:2], margin)]
    needed = max(under, default=-math.inf) + clearance + below_tcp
    return needed if pos[2] < needed else None


def segment_clear(a: np.ndarray, b: np.ndarray, centre: np.ndarray, half: float, samples: int = 40) -> bool:
    """Whether the segment a-b stays out of the axis-aligned square (centre, half size)."""
    points = a + np.linspace(0.0, 1.0, samples)[:, None] * (b - a)
    return not np.any(np.all(np.abs(points - centre) < half, axis=1))


def push_via_point(
    state: dict, start: np.ndarray, goal: np.ndarray, margin: float = 0.01
) -> np.ndarray | None:
    """None if a cube can be pushed straight from `start` to `goal` without touching the bin, else
    the corner (just outside the bin) to push it to first, on the shorter clear detour."""
    b, ch = state["bin"], state["cube_half"]
    centre, outer = b["pos"][:2], b["inner_half"] + b["wall"]
    blocked = outer + ch + 0.002  # the cube's centre may not enter this square (faces aligned)
    if segment_clear(start, goal, centre, blocked):
        return None
    corner = outer + ch * math.sqrt(2) + 2 * margin  # far enough for any cube rotation
    corners = [centre + corner * np.array([sx, sy]) for sx in (-1, 1) for sy in (-1, 1)]
    clear = [
        c
        for c in corners
        if segment_clear(start, c, centre, blocked) and segment_clear(c, goal, centre, blocked)
    ]
    if not clear:
        return None
    return min(clear, key=lambda c: np.linalg.norm(c - start) + np.linalg.norm(goal - c))
