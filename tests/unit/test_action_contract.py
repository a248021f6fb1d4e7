"""The data contract shared by recorded data, experts and the world model, for both arms."""

from __future__ import annotations

import numpy as np
import pytest

from robocoach_skills import action_contract
from robocoach_skills.composition import Subtask
from robocoach_skills.constants import ROBOTS, SUBTASK_ARGUMENTS
from robocoach_skills.tasks import task_suite


@pytest.mark.parametrize("robot", ROBOTS)
def test_pad_unpad_roundtrip_keeps_the_gripper_last(robot):
    x = np.random.default_rng(0).normal(size=(5, action_contract.native_dim(robot))).astype(np.float32)
    padded = action_contract.pad(robot, x)
    assert padded.shape == (5, action_contract.ACTION_DIM)
    assert np.array_equal(padded[:, -1], x[:, -1])
    assert np.array_equal(action_contract.unpad(robot, padded), x)
    assert np.all(padded[:, ~action_contract.channel_mask(robot)] == 0)


@pytest.mark.parametrize("robot", ROBOTS)
def test_every_task_argument_is_known_to_the_experts(robot):
    ids = {action_contract.argument_ids(s) for c in task_suite(robot) for s in c.subtasks}
    assert all(0 <= i < len(SUBTASK_ARGUMENTS) for pair in ids for i in pair)
    assert len({pair[0] for pair in ids}) > 1  # the object really distinguishes subtasks of one skill


def test_unknown_arguments_and_robots_are_refused():
    with pytest.raises(ValueError, match=r"'purple_cube'.*unknown to the experts"):
        action_contract.argument_ids(Subtask("pick", "purple_cube"))
    with pytest.raises(ValueError, match="unknown robot 'ur5'"):
        action_contract.pad("ur5", np.zeros(7))
    with pytest.raises(ValueError, match="franka vectors have 8 channels"):
        action_contract.pad("franka", np.zeros(7))
