"""The `progress_judge` node as a real process, called from this one over DDS.

The judge is small and untrained (the node's plumbing is under test, not the judge's skill), and the
node's verdict must equal `judge_episode` on the same frames in this process.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sensor_msgs.msg import Image, JointState

from robocoach_msgs.msg import TaskComposition
from robocoach_msgs.srv import JudgeRollout
from robocoach_skills.action_contract import native_dim
from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.constants import SERVICE_JUDGE_ROLLOUT
from robocoach_skills.nodes.conversions import composition_to_msg, image_to_msg
from robocoach_world.judge.checkpoint import DEADLINES_FILE, load_judge, save_judge
from robocoach_world.judge.model import JudgeConfig, ProgressJudge
from robocoach_world.judge.verdict import Deadlines, VerdictConfig, VideoClip, judge_episode
from ros_harness import call_service, running_node

pytestmark = pytest.mark.ros

SIZE = 16
FRAMES = 12
PERIOD = 0.1
TASK = Composition(
    "two_buttons", "piper", (Subtask("press_button", "red_button"), Subtask("press_button", "green_button"))
)
# A low threshold so the untrained judge (progress near 0.5) switches now and then.
RULE = VerdictConfig(threshold=0.5, consecutive=2)


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("judge") / "judge"
    torch.manual_seed(3)
    judge = ProgressJudge(
        JudgeConfig(image_size=SIZE, channels=(8, 8), feature_dim=8, embed_dim=2, hidden_dim=8)
    )
    save_judge(root, judge, RULE, {"val_mae": 0.5})
    Deadlines({"piper": {"press_button": 8, "pick": 8}}).save(root / DEADLINES_FILE)
    return root


@pytest.fixture(scope="module")
def node(ros_probe, judge_dir):
    with running_node(
        ros_probe, "robocoach_world", "progress_judge", "progress_judge", {"judge_dir": str(judge_dir)}
    ):
        yield


def _frames(n: int = FRAMES, size: int = SIZE) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def _proprio(n: int = FRAMES, robot: str = TASK.robot) -> np.ndarray:
    return np.random.default_rng(1).uniform(-1, 1, (n, native_dim(robot))).astype(np.float32)


def _joint_states(rows: np.ndarray) -> list[JointState]:
    return [JointState(position=row.tolist()) for row in rows]


def _request(
    frames: np.ndarray,
    composition_msg=None,
    period: float = PERIOD,
    proprio: np.ndarray | None = None,
    actions: np.ndarray | None = None,
) -> JudgeRollout.Request:
    return JudgeRollout.Request(
        composition=composition_msg or composition_to_msg(TASK),
        frames=[image_to_msg(f) for f in frames],
        proprio=_joint_states(_proprio(len(frames)) if proprio is None else proprio),
        actions=[] if actions is None else _joint_states(actions),
        frame_period=period,
    )


def test_verdict_matches_the_library_call(ros_probe, node, judge_dir):
    frames, proprio = _frames(), _proprio()
    response = call_service(ros_probe, JudgeRollout, SERVICE_JUDGE_ROLLOUT, _request(frames, proprio=proprio))
    assert response.ok, response.message
    judge, rule, _ = load_judge(judge_dir)
    clip = VideoClip(frames, TASK, 1 / PERIOD, proprio)
    expected = judge_episode(judge, clip, Deadlines.load(judge_dir / DEADLINES_FILE), rule)
    v = response.verdict
    assert v.composition == TASK.name and v.confidence == 1.0
    assert list(v.completed) == expected.completed and v.success == expected.success
    assert v.first_failed_index == expected.first_failed
    np.testing.assert_allclose(v.progress, expected.progress, atol=1e-6)
    np.testing.assert_allclose(v.switch_times, expected.switch_times, atol=1e-6)
    assert len(response.trace) == FRAMES
    np.testing.assert_allclose([p.progress for p in response.trace], expected.trace, atol=1e-6)
    assert [p.index for p in response.trace] == expected.active.tolist()
    assert all(p.skill == "press_button" for p in response.trace)
    assert response.trace[0].elapsed == 0.0 and not response.trace[0].completed


PICK = Composition("pick_red", "piper", (Subtask("pick", "red_cube"),))
HELD = 0.45  # a gripper reading in VerdictConfig.holding: what fingers on a cube read


@pytest.mark.parametrize(("command", "done"), [(None, True), (0.0, True), (HELD, False)])
def test_grasps_are_checked_against_the_sent_commands(ros_probe, node, judge_dir, command, done):
    """Fingers reading "holding" count as a grasp only where they read wider than commanded, as in
    `judge_episode` with the same actions; without actions the reading alone decides."""
    frames, proprio = _frames(), _proprio(robot=PICK.robot)
    proprio[:, -1] = HELD
    actions = None
    if command is not None:
        actions = proprio.copy()
        actions[:, -1] = command
    request = _request(frames, composition_to_msg(PICK), proprio=proprio, actions=actions)
    response = call_service(ros_probe, JudgeRollout, SERVICE_JUDGE_ROLLOUT, request)
    assert response.ok, response.message
    judge, rule, _ = load_judge(judge_dir)
    clip = VideoClip(frames, PICK, 1 / PERIOD, proprio, actions)
    expected = judge_episode(judge, clip, Deadlines.load(judge_dir / DEADLINES_FILE), rule)
    assert list(response.verdict.completed) == expected.completed == [done]
    np.testing.assert_allclose(response.verdict.switch_times, expected.switch_times, atol=1e-6)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"frames": _frames(0)}, "no frames"),
        ({"frames": _frames(size=SIZE * 2)}, "judge reads"),
        ({"period": 0.0}, "frame_period"),
        ({"proprio": np.zeros((0, native_dim(TASK.robot)), dtype=np.float32)}, "no proprio"),
        ({"proprio": _proprio(FRAMES - 1)}, "joint states for"),
        ({"proprio": _proprio(robot="franka")}, "must hold 7 finite positions"),
        ({"proprio": np.full((FRAMES, native_dim(TASK.robot)), np.nan, dtype=np.float32)}, "NaN"),
        ({"actions": _proprio(FRAMES - 1)}, "actions for"),
        ({"actions": np.full((FRAMES, native_dim(TASK.robot)), np.inf, dtype=np.float32)}, "infinite"),
        (
            {"composition_msg": TaskComposition(name="x", robot="ur5", subtasks=[])},
            "unknown robot",
        ),
        (
            {
                "composition_msg": composition_to_msg(
                    Composition("t", "piper", (Subtask("juggle", "red_cube"),))
                )
            },
            "unknown skill",
        ),
        (
            {
                "composition_msg": composition_to_msg(Composition("t", "franka", TASK.subtasks)),
                "proprio": _proprio(robot="franka"),
            },
            "no deadline",
        ),
    ],
)
def test_malformed_requests_are_refused_with_a_reason(ros_probe, node, change, message):
    request = _request(
        change.get("frames", _frames()),
        change.get("composition_msg"),
        change.get("period", PERIOD),
        change.get("proprio"),
        change.get("actions"),
    )
    response = call_service(ros_probe, JudgeRollout, SERVICE_JUDGE_ROLLOUT, request)
    assert not response.ok and message in response.message


def test_bad_image_encoding_is_refused(ros_probe, node):
    request = _request(_frames())
    request.frames[3] = Image(height=SIZE, width=SIZE, encoding="mono8", step=SIZE, data=bytes(SIZE * SIZE))
    response = call_service(ros_probe, JudgeRollout, SERVICE_JUDGE_ROLLOUT, request)
    assert not response.ok and "encoding" in response.message
