"""The franka backend's libfranka transport through the real pylibfranka, against franka-sim.

franka-sim speaks the libfranka network protocol (robot server version 10) on 1337/1338 and simulates an
FR3 in MuJoCo (here the model this project ships). It runs with `--enforce-motion-limits`, so a command
that breaks the FCI's position, velocity, acceleration or jerk limits aborts the motion as on the real
arm, and with a 30 mm virtual object between the fingers, so a grasp has something to close on.
Not enforced: communication constraints (`--enforce-comm-constraints`); two Python 1 kHz loops on a
shared 2-core machine lose cycles that the real FCI would count. A lost cycle is still extrapolated,
and on a loaded machine the next command, smooth as it is, can be judged a discontinuity against
that guess (the hazard libfranka documents). So the tests that move the arm run again, on a new
connection, when the arm aborted right after the loop missed cycles (the fault says so), up to
MOTION_ATTEMPTS times. An abort on a clean link fails them; when every attempt aborted after missed
cycles they xfail with the fault, since the FCI would abort there too: what they check then needs a
realtime loop, which this machine cannot give (inside the whole suite: 1 or 2 of these tests per run).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import pytest
from franka_sim_server import franka_sim

from robocoach_skills.constants import OBS_PROPRIO
from robocoach_skills.robots import FrankaConfig, FrankaRobot, RobotFaultError, make_robot
from robocoach_skills.robots.franka import (
    BRAKING_MARGIN,
    FR3_DECELERATION,
    FR3_LOWER,
    FR3_VELOCITY_OFFSET,
    MISSED_CYCLES_NOTE,
    JointTargetFilter,
    fr3_arm,
)
from robocoach_skills.sim.arms import clip_joint_command

pytest.importorskip("pylibfranka", reason="pylibfranka (requirements/python.txt) is not installed")
pytestmark = pytest.mark.slow

SIM_START_POSE = (0.0, 0.0, 0.0, -1.57, 0.0, 1.57, 0.785)  # franka-sim's ARM_INITIAL_Q [rad]
OBJECT_WIDTH = 0.03  # the virtual object between the fingers [m]
HAND_MAX_WIDTH = 0.08  # Franka Hand stroke [m], what homing measures
STATE_AGE_SLACK = 0.005  # [rad] motion between the worker's published state and observe()
POLICY_HZ = 10.0
# Trajectory: joints 1, 4 and 7 swing by AMPLITUDE around the start pose, one period in PERIOD seconds.
AMPLITUDE, PERIOD = 0.2, 2.0  # [rad], [s]
TRAJECTORY_JOINTS = (0, 3, 6)
# Tolerances of the tracking test: a target is due one policy period after it is sent; the filter's lag
# on this trajectory (peak 0.63 rad/s) is about 2 v / bandwidth = 0.05 rad.
TRACKING_TOLERANCE = 0.08  # measured pose vs the target sent one period earlier, every step [rad]
SETTLED_TOLERANCE = 0.005  # measured pose vs the last target, after SETTLE_TIME [rad]
SETTLE_TIME = 1.0  # [s]
LIMIT_APPROACH_TIMEOUT = 15.0  # the arm covers ~1 rad at the velocity bound; slack for a loaded machine [s]
REST_TOLERANCE = 0.01  # [rad]
MOTION_ATTEMPTS = 3  # a motion test's connections, while each aborts right after missed cycles


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("franka-sim")
    with franka_sim(
        log_dir, "--enforce-motion-limits", "--gripper-object-width", str(OBJECT_WIDTH)
    ) as server:
        yield server


def _robot(sim, **overrides) -> FrankaRobot:
    config = {"robot_ip": sim.host, "realtime": False, "policy_hz": POLICY_HZ, "feedback_timeout": 0.5}
    return make_robot("franka", **(config | overrides))


@pytest.fixture
def robot(sim):
    robot = _robot(sim, automatic_error_recovery=True)
    robot.connect()
    yield robot
    if robot.is_connected:
        robot.disconnect()


def _move(sim, motion: Callable[[FrankaRobot, Callable[[], str]], None]) -> None:
    """Run `motion(robot, log)` on a new connection, again while the arm aborts after missed cycles.

    `log()` is the server's log since this attempt connected, for the checks on what it flagged.
    """
    for attempt in range(1, MOTION_ATTEMPTS + 1):
        robot = _robot(sim, automatic_error_recovery=True)
        log_start = len(sim.log())
        robot.connect()
        try:
            motion(robot, lambda start=log_start: sim.log()[start:])
            return
        except (AssertionError, RobotFaultError):
            fault = robot.health().reason or ""
            if MISSED_CYCLES_NOTE not in fault:
                raise
            if attempt == MOTION_ATTEMPTS:
                pytest.xfail(f"all {MOTION_ATTEMPTS} attempts aborted right after missed cycles: {fault}")
            print(f"\nattempt {attempt} aborted after missed cycles, once more: {fault}")
        finally:
            if robot.is_connected:
                robot.disconnect()


def _wait_for(predicate, timeout: float = 5.0, poll: float = 0.002) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True


def _step_toward(robot: FrankaRobot, pose) -> bool:
    """One policy step toward `pose`; True once the arm is there (within SETTLED_TOLERANCE)."""
    robot.send_action(_action(pose))
    time.sleep(1.0 / POLICY_HZ)
    return bool(np.abs(robot.observe()[OBS_PROPRIO][:7] - np.asarray(pose)).max() < SETTLED_TOLERANCE)


def _opening(robot: FrankaRobot) -> float:
    return float(robot.observe()[OBS_PROPRIO][7])


def _action(joints, gripper: float = 1.0) -> np.ndarray:
    return np.append(np.asarray(joints, dtype=np.float64), gripper)


# ------------------------------------------------------------------------------------------- connect
def test_connect_configures_the_arm_and_reads_its_state(robot, sim):
    proprio = robot.observe()[OBS_PROPRIO]
    assert proprio.shape == (8,) and proprio.dtype == np.float32
    np.testing.assert_allclose(proprio[:7], SIM_START_POSE, atol=1e-3)
    assert proprio[7] == pytest.approx(1.0)  # homed: fingers fully open
    assert robot.health().ok
    log = sim.log()
    # Connect order seen by the peer: recovery, collision behaviour, impedance, then the motion.
    markers = [
        "Handling AutomaticErrorRecovery command",
        "Handling SetCollisionBehavior command",
        "Handling SetJointImpedance command",
        "controller_mode=kJointImpedance, motion_generator_mode=kJointPosition",
    ]
    positions = [log.rfind(marker) for marker in markers]
    assert all(p >= 0 for p in positions), dict(zip(markers, positions, strict=True))
    assert positions == sorted(positions)


def test_connect_to_nothing_fails_and_leaves_the_robot_disconnected(sim):
    robot = _robot(sim, robot_ip="127.0.0.1:1", connect_timeout=2.0)  # no FCI server behind that port
    with pytest.raises(RobotFaultError, match="cannot start the FR3"):
        robot.connect()
    assert not robot.is_connected


# ------------------------------------------------------------------------------------------- motion
def test_follows_a_short_joint_trajectory_within_tolerance(sim):
    _move(sim, _follow_a_sine)


def _follow_a_sine(robot: FrankaRobot, log: Callable[[], str]) -> None:
    start = np.asarray(SIM_START_POSE)
    assert _wait_for(lambda: _step_toward(robot, start))  # from wherever an aborted attempt left the arm
    steps = int(PERIOD * POLICY_HZ) + 1
    errors = []
    previous_target = None
    clock = robot.transport.robot_time  # paced on the Control's clock: a loaded machine slows the sim
    next_tick = clock()
    for k in range(steps):
        measured = robot.observe()[OBS_PROPRIO][:7]
        if previous_target is not None:
            errors.append(np.abs(measured - previous_target).max())
        target = start.copy()
        target[list(TRAJECTORY_JOINTS)] += AMPLITUDE * math.sin(2 * math.pi * k / (steps - 1))
        applied = robot.send_action(_action(target))
        np.testing.assert_allclose(applied[:7], target)  # inside every limit: nothing clipped
        previous_target = target
        next_tick += 1.0 / POLICY_HZ
        assert _wait_for(lambda tick=next_tick: clock() >= tick)
    settle_until = clock() + SETTLE_TIME
    assert _wait_for(lambda: clock() >= settle_until)
    settled = np.abs(robot.observe()[OBS_PROPRIO][:7] - previous_target).max()
    print(f"\ntracking error [rad]: max {max(errors):.4f}, mean {np.mean(errors):.4f}, settled {settled:.5f}")
    assert max(errors) < TRACKING_TOLERANCE
    assert settled < SETTLED_TOLERANCE
    assert robot.health().ok  # no motion-limit reflex: the 1 kHz command was smooth enough for the FCI
    assert "violation" not in log().lower()


def test_disconnect_comes_to_rest_and_finishes_the_motion_cleanly(sim):
    robot = _robot(sim)
    robot.connect()
    target = np.asarray(SIM_START_POSE)
    target[0] += 0.2
    robot.send_action(_action(target))
    time.sleep(0.05)  # disconnect while the arm is still moving
    arm_process = robot.transport._arm_process
    log_before = len(sim.log())
    robot.disconnect()
    assert not robot.is_connected
    assert arm_process.exitcode == 0
    # motion_finished sent at rest, not a preemption or an abort. The server logs it from its own
    # process, so the line can land a moment after disconnect() returns (CI once read it empty).
    assert _wait_for(lambda: "Motion finished" in sim.log()[log_before:]), sim.log()[log_before:]
    assert "violation" not in sim.log()[log_before:].lower()


def test_estop_preempts_the_motion_and_latches(robot, sim):
    log_before = len(sim.log())
    robot.estop()
    assert _wait_for(lambda: "Handling StopMove command" in sim.log()[log_before:])
    assert not robot.health().ok
    with pytest.raises(RobotFaultError, match="emergency stop"):
        robot.send_action(_action(SIM_START_POSE))
    robot.disconnect()
    robot.connect()  # reconnecting clears the latch
    assert robot.health().ok
    robot.send_action(_action(SIM_START_POSE))


# ------------------------------------------------------------------------------------------- safety
def test_nan_action_is_refused_before_reaching_the_arm(robot):
    before = robot.observe()[OBS_PROPRIO][:7]
    goal_before = np.array(robot.transport._arm_link.goal[:])
    with pytest.raises(ValueError, match="non-finite"):
        robot.send_action([0.0, 0.0, float("nan"), -1.57, 0.0, 1.57, 0.785, 1.0])
    np.testing.assert_array_equal(np.array(robot.transport._arm_link.goal[:]), goal_before)
    time.sleep(0.3)
    np.testing.assert_allclose(robot.observe()[OBS_PROPRIO][:7], before, atol=1e-4)
    assert robot.health().ok


def test_targets_past_the_fr3_limits_are_clipped_and_the_arm_stays_inside(sim):
    """q6 = 0 is inside the Panda range the shared ArmSpec uses but below the FR3's 0.5445 rad."""
    _move(sim, _drive_q6_past_its_limit)


def _drive_q6_past_its_limit(robot: FrankaRobot, log: Callable[[], str]) -> None:
    arm = fr3_arm()
    assert arm.lower[5] == FR3_LOWER[5]
    # The command brakes to a stop where its planned envelope (sqrt(2 * margin * decel * d) - offset)
    # reaches zero, just short of the limit.
    rest_gap = FR3_VELOCITY_OFFSET[5] ** 2 / (2 * BRAKING_MARGIN * FR3_DECELERATION[5])
    wild = np.asarray(SIM_START_POSE)
    wild[5] = 0.0
    lowest = math.inf
    deadline = time.monotonic() + LIMIT_APPROACH_TIMEOUT
    while lowest > arm.lower[5] + rest_gap + REST_TOLERANCE:
        assert time.monotonic() < deadline, f"q6 got no closer to its limit than {lowest:.4f} rad"
        measured, measured_at = robot.observe()[OBS_PROPRIO][:7], time.monotonic()
        applied = robot.send_action(_action(wild))
        # clipping is against the positions measured inside send_action; the arm may move meanwhile, and
        # observe() reads a state the 1 kHz worker published a moment earlier (STATE_AGE_SLACK)
        allowed = (
            np.asarray(arm.velocity) * (1.0 / POLICY_HZ + time.monotonic() - measured_at) + STATE_AGE_SLACK
        )
        assert applied[5] >= arm.lower[5]
        assert np.all(np.abs(applied[:7] - measured) <= allowed + 1e-6)
        time.sleep(1.0 / POLICY_HZ)
        lowest = min(lowest, float(robot.observe()[OBS_PROPRIO][5]))
    time.sleep(SETTLE_TIME)
    assert robot.observe()[OBS_PROPRIO][5] >= arm.lower[5]
    assert robot.health().ok
    assert "violation" not in log().lower()  # franka-sim checks the FR3 limits and velocity envelope


# ------------------------------------------------------------------------------------------- gripper
def test_gripper_homing_move_and_grasp(sim):
    _move(sim, _open_move_grasp_release)  # the arm moves too: back home from where the last test left it


def _open_move_grasp_release(robot: FrankaRobot, log: Callable[[], str]) -> None:
    home = np.asarray(SIM_START_POSE)
    assert _opening(robot) == pytest.approx(1.0)  # homing at connect opened the fingers fully
    robot.send_action(_action(home, 0.75))  # a move to 60 mm
    assert _wait_for(lambda: _opening(robot) == pytest.approx(0.75, abs=0.02))
    robot.send_action(_action(home, 0.0))  # a grasp: the fingers close until they meet the 30 mm object
    grasped = OBJECT_WIDTH / HAND_MAX_WIDTH
    assert _wait_for(lambda: _opening(robot) == pytest.approx(grasped, abs=0.02))
    robot.send_action(_action(home, 0.2))  # still "closed": the grasp holds, nothing new is sent
    time.sleep(0.3)
    assert _opening(robot) == pytest.approx(grasped, abs=0.02)
    robot.send_action(_action(home, 1.0))  # release: a move to fully open
    assert _wait_for(lambda: _opening(robot) == pytest.approx(1.0, abs=0.02))
    assert robot.health().ok  # every hand call succeeded (a failed move would have faulted the robot)
    assert "violation" not in log().lower()  # nor did the arm's way home break a limit


# ------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("transport", "ethercat"),
        ("robot_ip", ""),
        ("policy_hz", 0.0),
        ("gripper_deadband", 1.0),
        ("grasp_below", 0.0),
        ("max_jerk", 0.0),
        ("joint_impedance", (1.0,) * 6),
    ],
)
def test_config_rejects_bad_values_quoting_them(field, value):
    with pytest.raises(ValueError, match=field):
        FrankaConfig(**{field: value})


def test_filter_keeps_velocity_acceleration_and_jerk_bounded():
    """Goals jumping at 10 Hz by the largest step the base class lets through (clipped as it clips them,
    so some runs into the position limits), turned into 1 kHz commands."""
    arm = fr3_arm()
    limits = FrankaConfig(max_acceleration=5.0, max_jerk=2000.0).motion_limits(arm)
    command = JointTargetFilter(np.asarray(SIM_START_POSE), limits)
    rng = np.random.default_rng(0)
    dt, goal = 0.001, np.asarray(SIM_START_POSE)
    q = [command.q.copy()]
    for k in range(3000):
        if k % 100 == 0:
            wish = goal + rng.choice([-1.0, 1.0], size=7) * np.asarray(arm.velocity) / POLICY_HZ
            goal = clip_joint_command(arm, wish, command.q, 1.0 / POLICY_HZ)
        q.append(command.step(goal, dt))
    v = np.diff(np.array(q), axis=0) / dt
    a = np.diff(v, axis=0) / dt
    jerk = np.diff(a, axis=0) / dt
    assert np.all(np.abs(v) <= np.asarray(arm.velocity) + 1e-6)
    assert np.abs(a).max() <= limits.acceleration + 1e-6
    assert np.abs(jerk).max() <= limits.jerk + 1e-3
