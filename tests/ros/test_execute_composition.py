"""ExecuteTask from another process drives the sim robot to complete a composition with a well-trained expert.

"Well-trained" here means trained on demos from the very initial state the goal starts from: the
bootstrap experts do not succeed yet (docs/bootstrap.md), and this test is about the executor, not
about generalisation. The composition is the first subtask of `two_buttons` (press the red button),
reset through the sim's ResetScene to the demos' initial state; subtasks switch by the expert's done
head. The executor's SUCCESS is what its detector confirmed; the press itself is checked on the sim
node's privileged ground-truth topic.
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
from robocoach_skills.nodes.conversions import composition_to_msg
from robocoach_skills.tasks import get_composition
from ros_harness import running_node, send_goal, spin_until

pytestmark = [pytest.mark.ros, pytest.mark.slow]

ROBOT, TASK, SEED = "piper", "two_buttons", 1
DEMOS, TRAIN_STEPS = 4, 600
TIMEOUT_S = 60.0
STATUS_SUCCEEDED = 4


@pytest.fixture(scope="module")
def press_experts(tmp_path_factory):
    root = tmp_path_factory.mktemp("press_expert")
    return train_scripted_experts(
        root, ROBOT, TASK, subtasks=[0], demos_per_subtask=DEMOS, steps=TRAIN_STEPS, seed=SEED
    )


@pytest.mark.xfail(
    strict=False,
    reason="known failure, issue 4 open: the expert's done head confirms the press at progress 0.43-0.65 "
    "(touching the cap, before it latches), also with whole-chunk execution and with a perception prior "
    "(2026-11-30); see docs/bootstrap.md",
)
def test_execute_task_completes_the_press_and_streams_feedback(ros_probe, press_experts):
    composition = get_composition(ROBOT, TASK)
    first = Composition(TASK, ROBOT, composition.subtasks[:1])  # the name selects the reset's initial state
    with (
        running_node(ros_probe, "robocoach_skills", "sim_robot", "sim_robot", parameters={"robot": ROBOT}) as sim,  # noqa: E501
        running_node(
            ros_probe, "robocoach_skills", "skill_executor", "skill_executor",
            parameters={"robot": ROBOT, "experts_dir": str(press_experts), "detector": "done_head"},
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
    assert feedback and {f.current_skill for f in feedback} == {"press_button"}
    assert truth[-1]["composition"] == TASK and truth[-1]["seed"] == SEED
    assert truth[-1]["active_subtask"] == 0 and truth[-1]["success"], (truth[-1], sim_log)  # pressed
