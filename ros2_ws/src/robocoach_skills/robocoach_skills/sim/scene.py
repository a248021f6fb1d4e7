"""The embedded default robot: one arm on a table in MuJoCo, stepped at the policy rate.

An action is (n_joints + 1,) floats: absolute joint-position targets [rad] and a gripper command in
[0, 1] (1 = open). `step` refuses malformed actions (ValueError with the reason), clips the rest to
the joint limits and to what the velocity limits allow in one policy period, and ramps the servo
targets there over the period while physics runs at `physics_dt`. Observations carry only what a
real robot has (camera image, joint positions, gripper opening); `privileged_state` is ground
truth for progress/success labels and the scripted operator.

Example (`MUJOCO_GL=egl` for headless rendering):

    scene = SimScene(SceneConfig(robot="piper"))
    obs = scene.reset(get_composition("piper", "pick_place_bin"), seed=3)
    obs = scene.step(np.append(scene.joint_positions(), 1.0))   # hold still, gripper open
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np

from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.constants import OBS_IMAGE, OBS_PROPRIO, ROBOTS
from robocoach_skills.sim import mjcf
from robocoach_skills.sim.arms import ArmSpec, clip_joint_command, get_arm
from robocoach_skills.sim.layout import BUTTONS, CUBES, FLOOR_Z, InitialState, WorkspaceLayout, get_layout
from robocoach_skills.skills import get_skill
from robocoach_skills.tasks import sample_initial_state

MAX_IMAGE_SIZE = 224  # the model's offscreen buffer; larger images are refused
MIN_IMAGE_SIZE = 16
BUTTON_PRESSED_FRACTION = 0.6  # a button counts as pressed beyond this fraction of its travel
SPAWN_LIFT = 5e-4  # cubes are spawned this far above the table so they start out of contact [m]


@dataclass
class SceneConfig:
    """Settings of one simulated robot; nothing here depends on the episode seed."""

    robot: str = "franka"  # embodiment, one of constants.ROBOTS
    image_size: int = 64  # square camera image edge [px], 16..224
    policy_hz: float = 10.0  # action / observation rate [Hz]
    physics_dt: float = 0.002  # MuJoCo integration step [s]; 1/policy_hz must be a multiple of it
    render: bool = True  # False: observations carry proprio only (fast benchmarks, no GL needed)
    shadows: bool = False  # cast shadows; about 4x the render time with software/EGL rendering
    # Multisample anti-aliasing of the camera (MuJoCo's offsamples). 0 renders a 64 px frame about 4x
    # faster with software EGL (bench/deployed_step.py), but the frames differ at every edge: models
    # trained on frames of one setting meet a shift under the other: deploy them under theirs.
    antialias_samples: int = 4
    interpolation_chunks: int = 5  # servo targets ramp to each new command in this many pieces
    settle_time: float = 0.3  # physics time run after a reset so objects come to rest [s]

    def __post_init__(self) -> None:
        if self.robot not in ROBOTS:
            raise ValueError(f"SceneConfig.robot {self.robot!r} is not one of {ROBOTS}")
        if not MIN_IMAGE_SIZE <= self.image_size <= MAX_IMAGE_SIZE:
            raise ValueError(
                f"SceneConfig.image_size {self.image_size} outside [{MIN_IMAGE_SIZE}, {MAX_IMAGE_SIZE}]"
            )
        if not self.policy_hz > 0:
            raise ValueError(f"SceneConfig.policy_hz must be positive, got {self.policy_hz}")
        if not 0 < self.physics_dt <= 1.0 / self.policy_hz:
            raise ValueError(f"SceneConfig.physics_dt {self.physics_dt} must be in (0, 1/policy_hz]")
        ratio = 1.0 / (self.policy_hz * self.physics_dt)
        if abs(ratio - round(ratio)) > 1e-6:
            raise ValueError(
                f"SceneConfig: 1/policy_hz = {1.0 / self.policy_hz} s is not a multiple of "
                f"physics_dt = {self.physics_dt} s"
            )
        if not 1 <= self.interpolation_chunks <= round(ratio):
            raise ValueError(
                f"SceneConfig.interpolation_chunks {self.interpolation_chunks} must be in [1, {round(ratio)}]"
            )
        if self.settle_time < 0:
            raise ValueError(f"SceneConfig.settle_time must be >= 0, got {self.settle_time}")
        if self.antialias_samples < 0:
            raise ValueError(f"SceneConfig.antialias_samples must be >= 0, got {self.antialias_samples}")

    @property
    def substeps(self) -> int:
        """Physics steps per policy step."""
        return round(1.0 / (self.policy_hz * self.physics_dt))


def _yaw_quat(yaw: float) -> np.ndarray:
    return np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])


def _quat_yaw(quat: np.ndarray) -> float:
    w, x, y, z = quat
    return math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


class SimScene:
    """MuJoCo scene of one arm; see the module docstring for the action/observation contract."""

    def __init__(self, config: SceneConfig | None = None):
        self.config = config or SceneConfig()
        self.arm: ArmSpec = get_arm(self.config.robot)
        self.layout: WorkspaceLayout = get_layout(self.config.robot)
        physics = mjcf.PhysicsSpec(timestep=self.config.physics_dt, offscreen_size=MAX_IMAGE_SIZE)
        self.model = mujoco.MjModel.from_xml_string(mjcf.build_scene_xml(self.arm, self.layout, physics))
        self.data = mujoco.MjData(self.model)
        self._resolve_ids()
        self.model.light_castshadow[:] = self.config.shadows
        self.model.vis.quality.offsamples = self.config.antialias_samples
        self._nominal_light = (
            self.model.light_diffuse[self._light].copy(),
            self.model.light_pos[self._light].copy(),
        )
        self._renderer: mujoco.Renderer | None = None
        self.composition: Composition | None = None
        self.initial_state: InitialState | None = None
        self.seed: int | None = None
        self.active_subtask = 0
        self.steps = 0
        self._gripper_command = 1.0
        self._set_targets(np.array(self.arm.home, dtype=np.float64))
        ramp_sizes = [
            len(c) for c in np.array_split(np.arange(self.config.substeps), self.config.interpolation_chunks)
        ]
        self._ramp_bounds = np.cumsum(ramp_sizes)  # physics step at which each ramp piece ends
        self._press_count = dict.fromkeys(BUTTONS, 0)
        self._pressed = dict.fromkeys(BUTTONS, False)
        self._subtask_refs: dict[int, dict] = {}

    # ------------------------------------------------------------------ setup
    def _resolve_ids(self) -> None:
        m = self.model
        arm_joints = [m.joint(n) for n in self.arm.joint_names]
        self._arm_qpos = np.array([j.qposadr[0] for j in arm_joints])
        self._arm_dof = np.array([j.dofadr[0] for j in arm_joints])
        self._arm_act = np.array([m.actuator(mjcf.arm_actuator(n)).id for n in self.arm.joint_names])
        self._grip_act = m.actuator(mjcf.GRIPPER_ACTUATOR).id
        self._finger_qpos = np.array([m.joint(n).qposadr[0] for n in mjcf.FINGER_JOINTS])
        self._finger_geoms = tuple(m.geom(n).id for n in mjcf.FINGER_GEOMS)
        self._tcp = m.site(mjcf.TCP_SITE).id
        self._cube_qpos = {c: m.joint(mjcf.cube_joint(c)).qposadr[0] for c in CUBES}
        self._cube_dof = {c: m.joint(mjcf.cube_joint(c)).dofadr[0] for c in CUBES}
        self._cube_geom = {c: m.geom(mjcf.cube_geom(c)).id for c in CUBES}
        self._geom_to_cube = {g: c for c, g in self._cube_geom.items()}
        self._drawer_qpos = m.joint(mjcf.DRAWER_JOINT).qposadr[0]
        self._handle_site = m.site(mjcf.DRAWER_HANDLE_SITE).id
        self._interior_site = m.site(mjcf.DRAWER_INTERIOR_SITE).id
        self._button_qpos = {b: m.joint(mjcf.button_joint(b)).qposadr[0] for b in BUTTONS}
        self._button_site = {b: m.site(mjcf.button_top_site(b)).id for b in BUTTONS}
        self._coloured_geoms = {c: self._cube_geom[c] for c in CUBES} | {
            b: m.geom(mjcf.button_cap_geom(b)).id for b in BUTTONS
        }
        self._lamp_geoms = {b: m.geom(mjcf.button_lamp_geom(b)).id for b in BUTTONS}
        self._light = m.light(mjcf.KEY_LIGHT).id
        self._camera = m.camera(mjcf.CAMERA).id

    @property
    def n_joints(self) -> int:
        return self.arm.n_joints

    @property
    def action_dim(self) -> int:
        return self.arm.action_dim

    @property
    def dt(self) -> float:
        """Policy period [s]."""
        return 1.0 / self.config.policy_hz

    # ------------------------------------------------------------------ episodes
    def reset(self, composition: Composition, seed: int) -> dict:
        """Start an episode of `composition` from the initial state its distribution draws for `seed`."""
        return self.reset_to(composition, sample_initial_state(composition, seed), seed)

    def reset_to(self, composition: Composition, state: InitialState, seed: int | None = None) -> dict:
        """Start an episode of `composition` from an explicit initial state; returns the first observation."""
        if composition.robot != self.config.robot:
            raise ValueError(
                f"composition {composition.name!r} is for {composition.robot!r}, "
                f"the scene simulates {self.config.robot!r}"
            )
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        dims = self.layout.dims
        m.body("bin").pos[:2] = state.bin_xy
        m.body("pad").pos[:2] = state.pad_xy
        for b in BUTTONS:
            m.body(b).pos[:2] = state.button_xy[b]
        for name, geom in self._coloured_geoms.items():
            m.geom_rgba[geom] = state.rgba[name]
        for geom in self._lamp_geoms.values():
            m.geom_rgba[geom] = mjcf.BUTTON_LAMP_OFF_RGBA
        m.light_diffuse[self._light] = np.clip(self._nominal_light[0] * state.light_scale, 0.0, 1.0)
        m.light_pos[self._light] = self._nominal_light[1] + np.asarray(state.light_offset)
        q = np.clip(np.asarray(state.arm_q, dtype=np.float64), self.arm.lower_array, self.arm.upper_array)
        d.qpos[self._arm_qpos] = q
        d.qpos[self._finger_qpos] = self.arm.gripper.stroke / 2
        for cube, (x, y, yaw) in state.cubes.items():
            adr = self._cube_qpos[cube]
            support = 0.0 if cube in state.present else FLOOR_Z  # absent cubes wait on the floor
            d.qpos[adr : adr + 3] = (x, y, support + dims.cube_half + SPAWN_LIFT)
            d.qpos[adr + 3 : adr + 7] = _yaw_quat(yaw)
        d.qpos[self._drawer_qpos] = state.drawer_opening
        self._gripper_command = 1.0
        self._set_targets(q.copy())
        mujoco.mj_forward(m, d)
        settle_steps = round(self.config.settle_time / self.config.physics_dt)
        if settle_steps:
            mujoco.mj_step(m, d, nstep=settle_steps)
        self.composition, self.initial_state, self.seed = composition, state, seed
        self.steps = 0
        self._pressed = {b: self._button_depth(b) > self._press_threshold for b in BUTTONS}
        self._press_count = dict.fromkeys(BUTTONS, 0)
        self._subtask_refs = {}
        self.start_subtask(0)
        return self.observe()

    # ------------------------------------------------------------------ acting
    def _write_ctrl(self, arm_targets: np.ndarray) -> None:
        self.data.ctrl[self._arm_act] = arm_targets
        self.data.ctrl[self._grip_act] = self._gripper_command * self.arm.gripper.stroke / 2

    def _set_targets(self, q: np.ndarray) -> None:
        """Hold the servos at `q` from now on (no ramp)."""
        self._targets = self._ramp_start = q
        self._ramp_step = self.config.substeps
        self._write_ctrl(q)

    def command(self, action) -> np.ndarray:
        """Start ramping the servo targets to `action` over one policy period; returns the action applied
        (clipped). The physics does not move until `run`: a driver's clock calls it (`apply_action` below
        is the lockstep version). A command that arrives mid-ramp ramps on from where the targets are."""
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.size != self.action_dim:
            raise ValueError(
                f"action has {a.size} values; {self.arm.name} takes {self.action_dim} "
                f"({self.n_joints} joint targets + 1 gripper command)"
            )
        if not np.all(np.isfinite(a)):
            raise ValueError(
                f"action has non-finite values at indices {np.flatnonzero(~np.isfinite(a)).tolist()}"
            )
        applied = clip_joint_command(self.arm, a, self.joint_positions(), self.dt)
        ramping = self._ramp_step < self.config.substeps
        self._ramp_start = self.data.ctrl[self._arm_act].copy() if ramping else self._targets.copy()
        self._targets, self._ramp_step = applied[: self.n_joints], 0
        self._gripper_command = float(applied[-1])
        self.steps += 1
        return applied

    def run(self, physics_steps: int) -> None:
        """Advance the physics `physics_steps` steps, the servo targets following the current ramp in
        `interpolation_chunks` pieces (then holding its end)."""
        start, end, last = self._ramp_start, self._targets, self.config.interpolation_chunks - 1
        while physics_steps > 0:
            piece = min(int(np.searchsorted(self._ramp_bounds, self._ramp_step, side="right")), last)
            ramp_left = self._ramp_bounds[piece] - self._ramp_step
            n = min(physics_steps, ramp_left) if ramp_left > 0 else physics_steps
            self._write_ctrl(start + (end - start) * (piece + 1) / (last + 1))
            mujoco.mj_step(self.model, self.data, nstep=n)
            self._update_buttons()
            self._ramp_step += n
            physics_steps -= n

    def apply_action(self, action) -> np.ndarray:
        """Step the physics through one policy period; returns the action actually applied (clipped)."""
        applied = self.command(action)
        self.run(self.config.substeps)
        return applied

    def step(self, action) -> dict:
        """Apply one action (see `apply_action`) and return the next observation."""
        self.apply_action(action)
        return self.observe()

    def hold(self) -> None:
        """Make the current joint positions the servo targets (stop where the arm is)."""
        self._set_targets(self.joint_positions())

    def place_arm(self, q: np.ndarray, gripper_opening: float) -> None:
        """Teleport the arm to joint positions `q` and the fingers to an opening in [0, 1], unsimulated.

        For rendering frames of poses an episode has not reached (perception data): nothing is
        pushed out of the way, so only call it where a frame, not the physics, is wanted next.
        """
        q = np.clip(np.asarray(q, dtype=np.float64), self.arm.lower_array, self.arm.upper_array)
        self.data.qpos[self._arm_qpos] = q
        self.data.qpos[self._finger_qpos] = (
            float(np.clip(gripper_opening, 0.0, 1.0)) * self.arm.gripper.stroke / 2
        )
        self._set_targets(q.copy())
        mujoco.mj_forward(self.model, self.data)

    def latch_button(self, button: str) -> None:
        """Count a press of `button` and light its lamp: what a press does (`_update_buttons` calls it),
        and what a perception render of a pressed button needs without simulating the press."""
        self._press_count[button] += 1
        self.model.geom_rgba[self._lamp_geoms[button]] = mjcf.BUTTON_LAMP_ON_RGBA

    def project(self, points: np.ndarray) -> np.ndarray:
        """World points (N, 3) [m] -> camera pixel coordinates (N, 2) (column, row; row 0 at the top)."""
        cam = self._camera
        rot = self.data.cam_xmat[cam].reshape(3, 3)  # columns: the camera's x, y, z axes in the world
        local = (np.asarray(points, dtype=np.float64) - self.data.cam_xpos[cam]) @ rot  # (N, 3)
        size = self.config.image_size
        focal = size / 2 / math.tan(math.radians(self.model.cam_fovy[cam]) / 2)  # [px]
        depth = -local[:, 2]  # MuJoCo cameras look along their -z axis
        return np.stack(
            [size / 2 + focal * local[:, 0] / depth, size / 2 - focal * local[:, 1] / depth], axis=1
        )

    # ------------------------------------------------------------------ observing
    def joint_positions(self) -> np.ndarray:
        return self.data.qpos[self._arm_qpos].copy()

    def gripper_opening(self) -> float:
        """Measured distance between the fingers as a fraction of the stroke, 0..1."""
        return float(np.clip(self.data.qpos[self._finger_qpos].sum() / self.arm.gripper.stroke, 0.0, 1.0))

    def joint_targets(self) -> np.ndarray:
        """The last applied action (servo targets + gripper command)."""
        return np.append(self._targets, self._gripper_command)

    def observe(self) -> dict:
        """What a learner may see: camera image (if rendering) and proprioception."""
        proprio = np.append(self.joint_positions(), self.gripper_opening()).astype(np.float32)
        obs = {OBS_PROPRIO: proprio}
        if self.config.render:
            obs[OBS_IMAGE] = self.render()
        return obs

    def render(self) -> np.ndarray:
        """The fixed camera's current (H, W, 3) uint8 RGB frame (creates the renderer on first use)."""
        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.model, self.config.image_size, self.config.image_size)
        self._renderer.update_scene(self.data, camera=self._camera)
        return self._renderer.render().copy()

    def ee_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """Tool-centre-point position (3,) [m] and orientation quaternion (w, x, y, z), world frame."""
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, self.data.site_xmat[self._tcp])
        return self.data.site_xpos[self._tcp].copy(), quat

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # ------------------------------------------------------------------ ground truth
    @property
    def _press_threshold(self) -> float:
        return BUTTON_PRESSED_FRACTION * self.layout.dims.button_travel

    def _button_depth(self, button: str) -> float:
        return float(-self.data.qpos[self._button_qpos[button]])

    def _update_buttons(self) -> None:
        """Count presses (rising edges), so a brief press is not missed between observations."""
        for b in BUTTONS:
            pressed = self._button_depth(b) > self._press_threshold
            if pressed and not self._pressed[b]:
                self.latch_button(b)
            self._pressed[b] = pressed

    def _finger_contacts(self) -> dict[str, set[int]]:
        """For every cube, which fingers (0 = left, 1 = right) touch it right now."""
        touching: dict[str, set[int]] = {c: set() for c in CUBES}
        for contact in self.data.contact[: self.data.ncon]:
            for finger_index, finger in enumerate(self._finger_geoms):
                other = (
                    contact.geom2
                    if contact.geom1 == finger
                    else contact.geom1
                    if contact.geom2 == finger
                    else -1
                )
                if other in self._geom_to_cube:
                    touching[self._geom_to_cube[other]].add(finger_index)
        return touching

    def privileged_state(self) -> dict:
        """Ground-truth scene state (numpy arrays copied). Never give this to a learner."""
        d, dims = self.data, self.layout.dims
        rot = d.site_xmat[self._tcp].reshape(3, 3).copy()
        pos, quat = self.ee_pose()
        touching = self._finger_contacts()
        present = set(self.initial_state.present) if self.initial_state else set(CUBES)
        objects = {}
        for cube in CUBES:
            adr, dof = self._cube_qpos[cube], self._cube_dof[cube]
            objects[cube] = {
                "pos": d.qpos[adr : adr + 3].copy(),
                "quat": d.qpos[adr + 3 : adr + 7].copy(),
                "yaw": _quat_yaw(d.qpos[adr + 3 : adr + 7]),
                "speed": float(np.linalg.norm(d.qvel[dof : dof + 3])),
                "present": cube in present,
                "grasped": len(touching[cube]) == 2,
                "touching": len(touching[cube]),
            }
        interior = d.site_xpos[self._interior_site].copy()
        cabinet = self.model.body("cabinet").pos
        return {
            "time": float(d.time),
            "step": self.steps,
            "arm_q": self.joint_positions(),
            "ee_pos": pos,
            "ee_quat": quat,
            "ee_rot": rot,
            "ee_yaw": math.atan2(rot[1, 1], rot[0, 1]),  # direction of the closing axis
            "gripper_opening": self.gripper_opening(),
            "gripper_command": self._gripper_command,
            "cube_half": dims.cube_half,
            "objects": objects,
            "bin": {
                "pos": self.model.body("bin").pos.copy(),
                "inner_half": dims.bin_inner_half,
                "wall": dims.bin_wall,
                "height": dims.bin_height,
            },
            "pad": {"pos": self.model.body("pad").pos.copy(), "half": dims.pad_half},
            "drawer": {
                "opening": float(d.qpos[self._drawer_qpos]),
                "travel": dims.drawer_travel,
                "handle_pos": d.site_xpos[self._handle_site].copy(),
                "handle_radius": dims.handle_radius,
                "handle_standoff": dims.handle_standoff,
                "interior_floor": interior,  # centre of the drawer floor (moves with the drawer)
                "interior_half": dims.drawer_inner_half,
                "wall_top": interior[2] + dims.drawer_wall_height,
                "housing_front_x": float(cabinet[0] - dims.housing_half[0]),
                "housing_top": dims.housing_height,
                "housing_centre": cabinet[:2].copy(),
                "housing_half": dims.housing_half,
                # x of the outermost point (the handle bar), towards the robot
                "outer_x": float(d.site_xpos[self._handle_site][0] - dims.handle_radius),
            },
            "buttons": {
                b: {
                    "top_pos": d.site_xpos[self._button_site[b]].copy(),
                    "base_radius": dims.button_base_radius,
                    "depth": self._button_depth(b),
                    "travel": dims.button_travel,
                    "pressed": self._pressed[b],
                    "press_count": self._press_count[b],
                }
                for b in BUTTONS
            },
        }

    # ------------------------------------------------------------------ subtasks
    def _subtask(self, index: int) -> Subtask:
        if self.composition is None:
            raise RuntimeError("reset() the scene before asking about subtasks")
        if not 0 <= index < len(self.composition.subtasks):
            raise IndexError(f"subtask index {index} outside 0..{len(self.composition.subtasks) - 1}")
        return self.composition.subtasks[index]

    def start_subtask(self, index: int) -> None:
        """Make subtask `index` the active one; its progress is measured from the state now."""
        self._subtask(index)
        self._subtask_refs[index] = self.privileged_state()
        self.active_subtask = index

    def subtask_progress(self, index: int) -> float:
        """Ground-truth progress of subtask `index` in [0, 1]; 0 until it has been started."""
        sub = self._subtask(index)
        ref = self._subtask_refs.get(index)
        if ref is None:
            return 0.0
        return float(get_skill(sub.skill).progress(sub, ref, self.privileged_state()))

    def subtask_success(self, index: int) -> bool:
        """Whether subtask `index` is achieved now (False until it has been started)."""
        sub = self._subtask(index)
        ref = self._subtask_refs.get(index)
        if ref is None:
            return False
        return bool(get_skill(sub.skill).success(sub, ref, self.privileged_state()))

    def advance(self) -> int:
        """Move past every completed subtask; returns the active index (== len(subtasks) when done)."""
        if self.composition is None:
            raise RuntimeError("reset() the scene before asking about subtasks")
        n = len(self.composition.subtasks)
        while self.active_subtask < n and self.subtask_success(self.active_subtask):
            if self.active_subtask + 1 < n:
                self.start_subtask(self.active_subtask + 1)
            else:
                self.active_subtask = n
        return self.active_subtask
