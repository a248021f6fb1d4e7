"""Where things stand on the table: fixture dimensions, per-arm workspace layouts, initial states.

World frame: z = 0 is the table top, the arm base sits at the origin, x points away from the
robot into the workspace, y to the robot's left. The PiPER reaches about half as far as the
Franka, so each arm gets its own layout (same fixtures, same arrangement, tighter for PiPER).

`InitialState` is the full, explicit description of one episode's start; `tasks.py` samples one
from a seed, `SimScene.reset_to` applies it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Scene object names. They are the `object` / `target` strings of composition subtasks.
CUBES: tuple[str, ...] = ("red_cube", "green_cube", "blue_cube")
BUTTONS: tuple[str, ...] = ("red_button", "green_button")
PLACE_TARGETS: tuple[str, ...] = ("bin", "drawer", "pad")
PUSH_TARGETS: tuple[str, ...] = ("pad",)

# Nominal RGBA of each coloured thing; the seeded jitter is added on top.
OBJECT_RGBA: dict[str, tuple[float, float, float, float]] = {
    "red_cube": (0.85, 0.15, 0.15, 1.0),
    "green_cube": (0.15, 0.7, 0.2, 1.0),
    "blue_cube": (0.15, 0.3, 0.85, 1.0),
    "red_button": (0.9, 0.1, 0.1, 1.0),
    "green_button": (0.1, 0.8, 0.2, 1.0),
}


FLOOR_Z = -0.75  # the floor under the table [m]
# Cubes that are not part of an episode wait on the floor behind the table, out of reach and view.
PARK_XY: dict[str, tuple[float, float]] = {
    "red_cube": (-0.9, 0.9),
    "green_cube": (-0.9, 1.0),
    "blue_cube": (-0.9, 1.1),
}


@dataclass(frozen=True)
class FixtureDims:
    """Sizes of the fixtures [m]; the same physical props for every episode."""

    cube_half: float = 0.02  # half edge of the cubes
    cube_mass: float = 0.05  # [kg]
    bin_inner_half: float = 0.07  # half inner width of the (square) bin
    bin_wall: float = 0.01  # wall thickness of the bin
    bin_height: float = 0.07  # wall height of the bin
    pad_half: float = 0.045  # half edge of the flat target pad (push / place target)
    housing_half: tuple[float, float] = (0.10, 0.09)  # cabinet housing half extents (x, y)
    housing_height: float = 0.10  # cabinet housing height (top plate underside at this - plate)
    housing_plate: float = 0.01  # thickness of the housing plates
    drawer_inner_half: tuple[float, float] = (0.085, 0.07)  # drawer interior half extents (x, y)
    drawer_wall: float = 0.008  # drawer wall thickness
    drawer_wall_height: float = 0.05  # drawer side/back wall height above its floor
    drawer_travel: float = 0.15  # joint range of the drawer slide
    front_thickness: float = 0.015  # drawer front panel thickness
    handle_standoff: float = 0.045  # handle bar axis to front panel outer face
    handle_radius: float = 0.008  # handle bar radius
    handle_half_length: float = 0.05  # half length of the handle bar (along y)
    handle_height: float = 0.055  # handle bar height above the table
    button_base_radius: float = 0.035  # static button housing radius
    button_base_height: float = 0.02  # static button housing height
    button_cap_radius: float = 0.022  # moving cap radius
    button_cap_height: float = 0.012  # cap height above the housing when released
    button_travel: float = 0.012  # how far the cap can be pushed in
    button_stiffness: float = 400.0  # spring stiffness of the cap [N/m]


@dataclass(frozen=True)
class WorkspaceLayout:
    """Nominal fixture placement for one arm plus the zones initial states are sampled from."""

    robot: str
    dims: FixtureDims
    cube_zone: tuple[tuple[float, float], tuple[float, float]]  # ((x_min, x_max), (y_min, y_max))
    far_zone: tuple[tuple[float, float], tuple[float, float]]  # "hard": near the reach limit
    bin_xy: tuple[float, float]  # nominal bin centre
    pad_xy: tuple[float, float]  # nominal pad centre
    cabinet_xy: tuple[float, float]  # cabinet housing centre; the drawer opens towards -x
    button_xy: dict[str, tuple[float, float]]  # nominal button centres
    fixture_jitter: float  # uniform +- jitter of bin, pad and buttons per episode
    camera_pos: tuple[float, float, float]  # fixed camera position
    camera_target: tuple[float, float, float]  # point the camera looks at
    camera_fovy: float = 50.0  # vertical field of view [deg] (the image is square)
    park_xy: dict[str, tuple[float, float]] = field(
        default_factory=lambda: dict(PARK_XY)
    )  # absent cubes, on the floor

    def landmark_height(self, landmark: str) -> float:
        """Height [m] of a perception landmark (experts/perception.landmark_points) at rest on the table.
        The gripper has none: it moves (forward kinematics says where it is)."""
        d = self.dims
        heights = {
            **dict.fromkeys(CUBES, d.cube_half),  # centre
            **dict.fromkeys(BUTTONS, d.button_base_height + d.button_cap_height),  # top of the cap
            "bin": 0.0,  # floor centre
            "pad": 0.0,
            "drawer_handle": d.handle_height,
        }
        if landmark not in heights:
            raise ValueError(f"no resting height for landmark {landmark!r}; landmarks: {', '.join(heights)}")
        return heights[landmark]

    @property
    def drawer_front_x(self) -> float:
        """x of the drawer front panel's inner face when the drawer is closed."""
        return self.cabinet_xy[0] - self.dims.housing_half[0]


FRANKA_LAYOUT = WorkspaceLayout(
    robot="franka",
    dims=FixtureDims(),
    cube_zone=((0.40, 0.56), (-0.12, 0.10)),
    far_zone=((0.60, 0.68), (-0.12, 0.10)),
    bin_xy=(0.36, 0.30),
    pad_xy=(0.58, 0.25),
    cabinet_xy=(0.52, -0.34),
    button_xy={"red_button": (0.30, -0.16), "green_button": (0.28, 0.13)},
    fixture_jitter=0.015,
    camera_pos=(1.05, 0.0, 0.95),
    camera_target=(0.36, -0.02, 0.08),
    park_xy=PARK_XY,
)

PIPER_LAYOUT = WorkspaceLayout(
    robot="piper",
    dims=FixtureDims(
        bin_inner_half=0.055,
        bin_wall=0.008,
        bin_height=0.06,
        pad_half=0.04,
        housing_half=(0.08, 0.08),
        drawer_inner_half=(0.065, 0.06),
        drawer_travel=0.12,
    ),
    cube_zone=((0.24, 0.33), (-0.07, 0.06)),
    far_zone=((0.35, 0.40), (-0.07, 0.06)),
    bin_xy=(0.20, 0.22),
    pad_xy=(0.37, 0.16),
    cabinet_xy=(0.33, -0.24),
    button_xy={"red_button": (0.17, -0.11), "green_button": (0.14, 0.03)},
    fixture_jitter=0.01,
    camera_pos=(0.75, 0.0, 0.75),
    camera_target=(0.23, -0.02, 0.03),
    park_xy=PARK_XY,
)

LAYOUTS: dict[str, WorkspaceLayout] = {layout.robot: layout for layout in (FRANKA_LAYOUT, PIPER_LAYOUT)}


def get_layout(robot: str) -> WorkspaceLayout:
    try:
        return LAYOUTS[robot]
    except KeyError:
        raise ValueError(f"no workspace layout for robot {robot!r}; known: {', '.join(LAYOUTS)}") from None


@dataclass(frozen=True)
class InitialState:
    """One episode's starting state, explicit enough to reproduce it exactly."""

    cubes: dict[str, tuple[float, float, float]]  # cube -> (x, y, yaw) on the table (parked if absent)
    present: tuple[str, ...]  # cubes on the workspace (task objects + distractors)
    bin_xy: tuple[float, float]
    pad_xy: tuple[float, float]
    button_xy: dict[str, tuple[float, float]]
    drawer_opening: float  # initial drawer slide position [m], 0 = closed
    arm_q: tuple[float, ...]  # initial joint positions [rad]
    rgba: dict[str, tuple[float, float, float, float]]  # colour of each coloured object
    light_scale: float  # multiplies the key light's diffuse colour
    light_offset: tuple[float, float, float]  # added to the key light's position [m]
    region: str  # "easy" or a label of the hard region the episode was drawn from
