"""The judge reads the hand (TCP position from forward kinematics, gripper reading) with each frame,
online exactly as over a whole segment, and refuses to judge without it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robocoach_skills.action_contract import native_dim, pad, robot_id
from robocoach_skills.composition import Subtask
from robocoach_skills.kinematics import ArmKinematics
from robocoach_world.judge.model import HAND_DIM, JudgeConfig, ProgressJudge
from robocoach_world.judge.verdict import BatchedJudge

SIZE = 16
CONFIG = JudgeConfig(image_size=SIZE, channels=(8, 8), feature_dim=8, embed_dim=2, hidden_dim=8)
PICK = Subtask("pick", "red_cube")


def _proprio(robot: str, steps: int, seed: int = 0) -> np.ndarray:
    """(steps, 8) padded proprio: small joint angles, gripper readings in [0, 1]."""
    rng = np.random.default_rng(seed)
    native = rng.uniform(-0.5, 0.5, (steps, native_dim(robot))).astype(np.float32)
    native[:, -1] = rng.uniform(0, 1, steps)
    return pad(robot, native)


@pytest.mark.parametrize("robot", ["franka", "piper"])
def test_the_hand_columns_are_the_tcp_position_in_hand_units_and_the_gripper(robot):
    torch.manual_seed(0)
    judge = ProgressJudge(CONFIG).eval()
    proprio = torch.as_tensor(_proprio(robot, 5))
    frames = torch.randint(0, 256, (5, SIZE, SIZE, 3), dtype=torch.uint8)
    robots = torch.full((5,), robot_id(robot))
    read = judge.observe(frames, proprio, robots)
    assert read.shape == (5, CONFIG.feature_dim + HAND_DIM) == (5, CONFIG.step_dim)
    position, _ = ArmKinematics().tcp_pose(proprio, robots)
    torch.testing.assert_close(read[:, -HAND_DIM:-1], position / CONFIG.hand_unit)
    torch.testing.assert_close(read[:, -1], proprio[:, -1])
    torch.testing.assert_close(read[:, : CONFIG.feature_dim], judge.encoder(frames))


def test_a_hand_judge_refuses_frames_without_proprio_and_a_frames_only_judge_needs_none():
    frames = torch.zeros(1, 3, SIZE, SIZE, 3, dtype=torch.uint8)
    judge = ProgressJudge(CONFIG)
    with pytest.raises(ValueError, match=r"JudgeConfig\.hand"):
        judge(frames, judge.condition(["franka"], [PICK]))
    frames_only = ProgressJudge(
        JudgeConfig(image_size=SIZE, channels=(8, 8), feature_dim=8, hand=False, hand_skills=())
    )
    logits, _ = frames_only(frames, frames_only.condition(["franka"], [PICK]))
    assert logits.shape == (1, 3, 2)


def test_online_judging_equals_judging_the_whole_segment():
    torch.manual_seed(1)
    judge = ProgressJudge(CONFIG).eval()
    steps = 6
    frames = np.random.default_rng(2).integers(0, 256, (steps, SIZE, SIZE, 3), dtype=np.uint8)
    proprio = _proprio("piper", steps, seed=3)
    with torch.no_grad():
        cond = judge.condition(["piper"], [PICK])
        logits, _ = judge(torch.as_tensor(frames)[None], cond, proprio=torch.as_tensor(proprio)[None])
    online = BatchedJudge(judge, rows=1)
    online.reset_rows([0], [PICK], "piper")
    progress, done = [], []
    for t in range(steps):
        progress.append(online.update(frames[t : t + 1], proprio[t : t + 1])[0])
        done.append(online.done[0])
    scores = torch.sigmoid(logits[0]).numpy()
    np.testing.assert_allclose(progress, scores[:, 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(done, scores[:, 1], rtol=1e-5, atol=1e-6)


def test_hand_skills_see_no_frames_online_and_over_a_segment():
    """A pick (a hand skill by default) is judged the same whatever its frames show; a press reads
    them. Online judging equals judging the whole segment."""
    torch.manual_seed(4)
    judge = ProgressJudge(CONFIG).eval()
    assert CONFIG.hand_skills == ("pick",)
    rng = np.random.default_rng(5)
    frames = rng.integers(0, 256, (2, 5, SIZE, SIZE, 3), dtype=np.uint8)
    other = rng.integers(0, 256, frames.shape, dtype=np.uint8)
    proprio = torch.as_tensor(np.stack([_proprio("franka", 5, seed=k) for k in (6, 7)]))
    press = Subtask("press_button", "red_button")
    cond = judge.condition(["franka", "franka"], [PICK, press])
    with torch.no_grad():
        logits, _ = judge(torch.as_tensor(frames), cond, proprio=proprio)
        changed, _ = judge(torch.as_tensor(other), cond, proprio=proprio)
    torch.testing.assert_close(logits[0], changed[0])
    assert not torch.allclose(logits[1], changed[1])
    online = BatchedJudge(judge, rows=2)
    online.reset_rows([0, 1], [PICK, press], "franka")
    done = [(online.update(other[:, t], proprio[:, t].numpy()), online.done.copy())[1] for t in range(5)]
    np.testing.assert_allclose(
        np.stack(done, 1), torch.sigmoid(changed[..., 1]).numpy(), rtol=1e-5, atol=1e-6
    )


def test_hand_skills_must_be_skills_and_need_the_hand():
    with pytest.raises(ValueError, match="not skills"):
        ProgressJudge(JudgeConfig(**{**CONFIG.__dict__, "hand_skills": ("juggle",)}))
    with pytest.raises(ValueError, match="needs hand=True"):
        JudgeConfig(**{**CONFIG.__dict__, "hand": False, "hand_skills": ("pick",)})
