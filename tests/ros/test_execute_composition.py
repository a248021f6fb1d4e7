"""ExecuteTask from another process drives the sim robot to complete a composition with a well-trained expert.

"Well-trained" here means trained on demos from the very initial state the goal starts from: the
bootstrap experts do not generalise yet (docs/bootstrap.md), and this test is about the executor, not
about generalisation. The composition is the first subtask of `close_then_push` (close the drawer),
reset through the sim's ResetScene to the demos' initial state; subtasks switch by the expert's done
head. The executor's SUCCESS is what its detector confirmed; that the drawer really closed is checked
on the sim node's privileged ground-truth topic.

The expert is trained for 1500 steps: after 600 its done head confirmed at ground-truth progress
0.67, in-process as through ROS, and the drawer stalled at 0.76 (measured 2026-12-01). Experts this
small vary with their seed (of three 1500-step experts, one stalled at 0.84 in-process): the
fixture's is seeded, so it is the same expert on every run.

Closing the drawer rather than pressing a button: a 4-demo press expert's done head fires one or two
steps before the button latches (probabilities 0.57-0.65 before, 0.71-0.76 after; measured
2026-12-01), so the test would measure that expert's done head, not the executor.
"""

from __future__ import annotations

import json

import pytest
from offboard_models import train_scripted_experts
from rclpy.action import ActionClient
from std_msgs.msg import String

from robocoach_msgs.action import ExecuteTask
from robocoach_skills.composition import Composition
from robocoach_skills.constants import ACTION_EXECUTE_TASK
from robocoach_skills.experts import ExpertConfig
from robocoach_skills.nodes.conversions import composition_to_msg
from robocoach_skills.tasks import get_composition
from ros_harness import running_node, send_goal, spin_until

pytestmark = [pytest.mark.ros, pytest.mark.slow]

ROBOT, TASK, SEED = "piper", "close_then_push", 1
DEMOS, TRAIN_STEPS = 4, 1500  # 600 steps left the drawer at 0.76 progress in-process too
# How the executor runs this expert (measured 2026-12-01 on seed 1, in-process, with the expert this
# fixture trains): the done head crosses 0.5 within a step or two of the drawer closing, so the
# detector waits 4 steps above it, not the default 2; and the expert re-plans every 4 steps, since
# with whole 8-step chunks it stopped 1 mm short of closed (progress 0.99). Through ROS with these
# settings it closed the drawer 4 times in 4.
DONE_PATIENCE, N_ACTION_STEPS = 4, 4
TIMEOUT_S = 60.0
STATUS_SUCCEEDED = 4


@pytest.fixture(scope="module")
def close_experts(tmp_path_factory):
    root = tmp_path_factory.mktemp("close_expert")
    # The expert config measured 4 in 4 through ROS: joint-space actions, no keypoint skip. With the
    # skip (default since 2026-12-02) this expert closes the drawer in process (done at progress 1.0)
    # but stopped at 0.83-0.88 through ROS (4 runs, done patience 4 and 8). With hand-space actions as
    # well (the default after it) it timed out once through ROS, while the executor still solved the
    # IK every step, and closed the drawer once after it solved it once per chunk (5 late ticks); in
    # process it is done at step 67 of 103. Through ROS the physics runs on the wall clock, so a late
    # tick gives the arm more time per policy step than the demos had: a likely cause, not yet
    # separated. This test is about the executor, so it keeps the expert measured 4 in 4.
    return train_scripted_experts(
        root, ROBOT, TASK, subtasks=[0], demos_per_subtask=DEMOS, steps=TRAIN_STEPS, seed=SEED,
        expert=ExpertConfig(keypoint_skip=False, action_space="joint"),
    )  # fmt: skip


def test_execute_task_completes_the_subtask_and_streams_feedback(ros_probe, close_experts):
    composition = get_composition(ROBOT, TASK)
    first = Composition(TASK, ROBOT, composition.subtasks[:1])  # the name selects the reset's initial state
    with (
        running_node(ros_probe, "robocoach_skills", "sim_robot", "sim_robot", parameters={"robot": ROBOT}) as sim,  # noqa: E501
        running_node(
            ros_probe, "robocoach_skills", "skill_executor", "skill_executor",
            parameters={
                "robot": ROBOT, "experts_dir": str(close_experts),
                "detector": "done_head", "done_patience": DONE_PATIENCE, "n_action_steps": N_ACTION_STEPS,
            },
        ) as executor,
    ):  # fmt: skip
        truth: list[dict] = []
        subscription = ros_probe.create_subscription(
            String, "/sim_robot/ground_truth", lambda m: truth.append(json.loads(m.data)), 10
        )
        client = ActionClient(ros_probe, ExecuteTask, ACTION_EXECUTE_TASK)
        goal = ExecuteTask.Goal(
            composition=composition_to_msg(first), initial_state_seed=SEED, reset_scene=True
        )
        handle, feedback = send_goal(ros_probe, client, goal, TIMEOUT_S)
        result = handle.get_result_async()
        spin_until(ros_probe, result.done, 2 * TIMEOUT_S, "ExecuteTask result")
        seen = len(truth)
        spin_until(ros_probe, lambda: len(truth) > seen, TIMEOUT_S, "ground truth after the goal")
        client.destroy()
        ros_probe.destroy_subscription(subscription)
        sim_log = sim.log()[-3000:]
    answer = result.result()
    assert answer.status == STATUS_SUCCEEDED, executor.log()
    assert answer.result.outcome == "SUCCESS" and answer.result.success, answer.result.message
    assert answer.result.subtasks[0].completed and answer.result.first_failed_index == -1
    assert feedback and {f.current_skill for f in feedback} == {"close_drawer"}
    assert truth[-1]["composition"] == TASK and truth[-1]["seed"] == SEED
    assert truth[-1]["active_subtask"] == 0 and truth[-1]["success"], (truth[-1], sim_log)  # closed
