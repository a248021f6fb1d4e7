"""Closed-loop imagination: the router's rule per row, deadlines, majority over world seeds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robocoach_skills.action_contract import native_dim, pad, unpad
from robocoach_skills.experts import ExpertConfig, ExpertLibrary
from robocoach_skills.sim.arms import check_joint_command, get_arm
from robocoach_skills.tasks import get_composition
from robocoach_world import imagine as imagine_module
from robocoach_world.imagine import ImaginationConfig, imagine_composition
from robocoach_world.judge.model import JudgeConfig, ProgressJudge
from robocoach_world.judge.verdict import NEVER, Deadlines, VerdictConfig
from robocoach_world.world.model import CoachWorld, WorldConfig

SIZE = 32
DEADLINE = 6  # policy steps per subtask
FPS = 10.0


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    world = CoachWorld(
        WorldConfig(image_size=SIZE, channels=(8, 16), embed_dim=32, hidden_dim=32, latent_dim=4)
    )
    judge = ProgressJudge(
        JudgeConfig(image_size=SIZE, channels=(8, 8), feature_dim=16, hidden_dim=16, groups=4)
    )
    expert = ExpertConfig(
        image_size=SIZE, conv_channels=(8, 16), norm_groups=4, proprio_hidden=32, robot_embed_dim=4,
        embed_dim=64, head_hidden=64, chunk_len=4, lora_layers=("conv1", "fuse", "trunk"),
    )  # fmt: skip
    library = ExpertLibrary(expert, skills=["press_button", "pick", "place"])
    return world.eval(), judge.eval(), library


def _judge_saying(judge: ProgressJudge, logit: float) -> ProgressJudge:
    """The same judge with its outputs (progress and done) pinned: sigmoid(logit) on every frame."""
    pinned = ProgressJudge(judge.config)
    pinned.load_state_dict(judge.state_dict())
    last = pinned.head[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.fill_(logit)
    return pinned.eval()


def _initial(robot: str, n: int):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n, SIZE, SIZE, 3), dtype=np.uint8)
    proprio = rng.uniform(-0.5, 0.5, (n, native_dim(robot))).astype(np.float32)
    return images, proprio


def _deadlines(robot: str) -> Deadlines:
    return Deadlines({robot: {"press_button": DEADLINE, "pick": DEADLINE, "place": DEADLINE}})


@pytest.mark.parametrize("robot", ["franka", "piper"])
def test_a_judge_that_never_confirms_fails_every_trial_at_its_first_deadline(models, robot):
    world, judge, library = models
    composition = get_composition(robot, "two_buttons")
    images, proprio = _initial(robot, 3)
    config = ImaginationConfig(num_rollouts=5, num_world_seeds=3, horizon=50, keep_frames=True)
    trials = imagine_composition(
        world, _judge_saying(judge, -5.0), library, _deadlines(robot), composition, images, proprio, config,
        versions={"press_button": 4}, initial_seeds=[10, 11, 12], fps=FPS,
    )  # fmt: skip
    assert len(trials) == 5
    for k, trial in enumerate(trials):
        assert trial.record.first_failed_index == 0 and trial.record.valid and trial.confidence == 1.0
        assert trial.record.versions == (4, 4) and trial.record.skills == ("press_button", "press_button")
        assert (trial.record.initial_state_id, trial.record.seed) == (k % 3, 10 + k % 3)
        assert [s.steps for s in trial.seeds] == [DEADLINE] * 3
        assert trial.frames.shape == (DEADLINE, SIZE, SIZE, 3) and trial.frames.dtype == np.uint8
        assert trial.trace.shape == (DEADLINE,) and np.all(trial.trace < 0.01)


def _gripper_pinned(world: CoachWorld, reading: float, command: float, monkeypatch) -> None:
    """The world imagines what it would, except that the gripper always reads `reading`, and every
    expert commands the gripper to `command`."""
    imagine, applied = world.imagine, imagine_module._applied

    def pinned(*args, **kwargs):
        state, frames, proprio = imagine(*args, **kwargs)
        proprio = proprio.clone()
        proprio[..., -1] = reading
        return state, frames, proprio

    def commanding(*args, **kwargs):
        actions = applied(*args, **kwargs).clone()
        actions[:, -1] = command
        return actions

    monkeypatch.setattr(world, "imagine", pinned)
    monkeypatch.setattr(imagine_module, "_applied", commanding)


@pytest.mark.parametrize(
    ("gripper", "command", "holds"),
    [(0.45, 0.0, True), (0.0, 0.0, False), (0.45, 0.45, False)],
    ids=["closed_on_a_cube", "closed_on_nothing", "open_as_commanded"],
)
def test_a_judge_that_always_confirms_switches_every_consecutive_steps_where_the_fingers_hold(
    models, gripper, command, holds, monkeypatch
):
    """A Franka holding a cube reads 0.45 commanded closed; closed on nothing it reads 0; fingers that
    read what they were commanded (pre-shaped, or opening after a miss) hold nothing either."""
    world, judge, library = models
    _gripper_pinned(world, gripper, command, monkeypatch)
    composition = get_composition("franka", "pick_place_bin")
    images, proprio = _initial("franka", 2)
    # no release check: a pinned hand never lets go of the place
    rule = VerdictConfig(threshold=0.9, consecutive=2, release_skills=())
    config = ImaginationConfig(num_rollouts=4, num_world_seeds=3, horizon=50, n_action_steps=3)
    trials = imagine_composition(
        world, _judge_saying(judge, 5.0), library, _deadlines("franka"), composition, images, proprio, config,
        verdict=rule, fps=FPS,
    )  # fmt: skip
    for trial in trials:
        assert trial.record.valid
        for seed in trial.seeds:
            if holds:  # judged from the first frame after an action on, as the router does: 2 steps each
                assert seed.switch_times == pytest.approx([2 / FPS, 4 / FPS]) and seed.steps == 4
            else:  # the frames say done, the imagined gripper says empty: the pick runs to its deadline
                assert seed.switch_times == [NEVER, NEVER] and seed.steps == DEADLINE
        assert trial.record.success == holds


@pytest.mark.parametrize("robot", ["franka", "piper"])
def test_the_world_is_sent_the_actions_the_robot_would_apply(models, robot, monkeypatch):
    """Robots clip every command to their limits (robots.base) and CoachWorld learned from what they
    applied; an expert's raw output (here: its head's bias pushed far out) must be clipped the same way."""
    world, judge, library = models
    sent: list[tuple[torch.Tensor, torch.Tensor]] = []  # (actions, proprio they start from)
    imagine, last = world.imagine, {}

    def spying(state, actions, *args, **kwargs):
        sent.append((actions[:, 0].clone(), last["proprio"].clone()))
        state, frames, proprio = imagine(state, actions, *args, **kwargs)
        last["proprio"] = proprio[:, -1]
        return state, frames, proprio

    monkeypatch.setattr(world, "imagine", spying)
    wild = ExpertLibrary(library.config, skills=list(library.skills))
    with torch.no_grad():
        for p in wild.heads.parameters():
            p.add_(3.0)
    images, _ = _initial(robot, 2)
    arm = get_arm(robot)
    proprio = np.tile(np.append(arm.home, 1.0), (2, 1)).astype(np.float32)  # within the joint limits
    last["proprio"] = torch.as_tensor(pad(robot, proprio))
    config = ImaginationConfig(num_rollouts=2, num_world_seeds=1, agreement=1, horizon=4)
    imagine_composition(
        world, _judge_saying(judge, -5.0), wild, _deadlines(robot), get_composition(robot, "two_buttons"),
        images, proprio, config, fps=FPS,
    )  # fmt: skip
    clipped_some = False
    for actions, start in sent:
        native, current = unpad(robot, actions.numpy()), unpad(robot, start.numpy())[:, : arm.n_joints]
        for a, q in zip(native, current, strict=True):
            assert check_joint_command(arm, a, q, 1 / FPS) is None
            clipped_some |= bool(a[-1] in (0.0, 1.0))
    assert len(sent) == 4 and clipped_some


def test_world_seeds_change_the_imagined_frames_and_the_seed_reproduces_them(models):
    world, judge, library = models
    composition = get_composition("piper", "two_buttons")
    images, proprio = _initial("piper", 1)
    config = ImaginationConfig(num_rollouts=1, num_world_seeds=2, horizon=4, keep_frames=True)
    run = lambda c: imagine_composition(  # noqa: E731
        world, _judge_saying(judge, -5.0), library, _deadlines("piper"), composition, images, proprio, c
    )
    first, again = run(config)[0], run(config)[0]
    assert np.array_equal(first.frames, again.frames)
    other = run(ImaginationConfig(num_rollouts=1, num_world_seeds=2, horizon=4, keep_frames=True, seed=1))[0]
    assert not np.array_equal(first.frames, other.frames)


def test_unknown_skills_and_mismatched_initial_states_are_refused(models):
    world, judge, library = models
    images, proprio = _initial("franka", 2)
    with pytest.raises(ValueError, match="no expert for"):
        imagine_composition(
            world, judge, library, _deadlines("franka"), get_composition("franka", "drawer_store"),
            images, proprio, ImaginationConfig(num_rollouts=1),
        )  # fmt: skip
    with pytest.raises(ValueError, match="matching initial"):
        imagine_composition(
            world, judge, library, _deadlines("franka"), get_composition("franka", "two_buttons"),
            images, proprio[:1], ImaginationConfig(num_rollouts=1),
        )  # fmt: skip


def test_never_is_the_switch_time_of_an_unconfirmed_subtask(models):
    world, judge, library = models
    images, proprio = _initial("piper", 1)
    trial = imagine_composition(
        world, _judge_saying(judge, -5.0), library, _deadlines("piper"),
        get_composition("piper", "two_buttons"), images, proprio,
        ImaginationConfig(num_rollouts=1, num_world_seeds=1, agreement=1),
    )[0]  # fmt: skip
    assert trial.seeds[0].switch_times == [NEVER, NEVER]


def test_a_step_moves_only_the_running_rows(models):
    from robocoach_world.imagine import _step_world

    world = models[0]
    images, proprio = _initial("franka", 3)
    ids = torch.zeros(3, dtype=torch.long)
    images, proprio = torch.as_tensor(images), torch.as_tensor(proprio)  # franka: native = padded
    state = world.observe(images[:, None], proprio[:, None], ids)
    actions = torch.rand(3, 8) * 0.1
    after, new_images, new_proprio = _step_world(
        world, state, actions, ids, torch.Generator().manual_seed(0), None, np.array([0, 2]), images, proprio
    )
    assert torch.equal(after.h[1], state.h[1]) and torch.equal(new_images[1], images[1])
    assert torch.equal(new_proprio[1], proprio[1])
    assert not torch.equal(after.h[0], state.h[0]) and not torch.equal(new_proprio[2], proprio[2])
    assert after.skip_terms is state.skip_terms and new_images.shape == images.shape
    # The first step of all rows draws each rollout's grasp outcome; a step of some rows keeps every draw.
    drawn, _, _ = _step_world(
        world, state, actions, ids, torch.Generator().manual_seed(0), None, None, images, proprio
    )
    later, _, _ = _step_world(
        world, drawn, actions, ids, torch.Generator().manual_seed(1), None, np.array([1]), images, proprio
    )
    assert drawn.grasp_draw is not None and torch.equal(later.grasp_draw, drawn.grasp_draw)


def test_each_row_s_first_frame_is_looked_at_once_per_subtask():
    """Imagination remembers each row's first-frame keypoints from its first refill in a subtask, and
    looks again only at rows that switched."""
    from robocoach_world.imagine import _Memory

    class Looking:
        def __init__(self) -> None:
            self.rows: list[int] = []

        def start_keypoints(self, frames: torch.Tensor, skill: str) -> torch.Tensor:
            self.rows += [int(v) for v in frames[:, 0, 0, 0] * 255]  # each frame's row, written in it
            return frames[:, 0, 0, :2]  # (N, 2): "keypoints" that say which frame they came from

    frames = torch.zeros(4, 2, 2, 3, dtype=torch.uint8)
    frames[:, 0, 0, 0] = torch.arange(4, dtype=torch.uint8)
    memory, library = _Memory(frames.clone(), np.zeros(4, dtype=bool)), Looking()
    first = memory.keypoints_of(library, np.array([0, 2]), "pick")
    again = memory.keypoints_of(library, np.array([0, 1, 2]), "pick")
    assert library.rows == [0, 2, 1]
    torch.testing.assert_close(again[[0, 2]], first)
    switched = frames[3].clone()
    switched[0, 0, 0] = 9
    memory.forget(2, switched)  # row 2 starts its next subtask on another frame
    after = memory.keypoints_of(library, np.array([0, 1, 2]), "place")
    assert library.rows == [0, 2, 1, 9] and after[2, 0] * 255 == pytest.approx(9)
