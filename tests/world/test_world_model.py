"""CoachWorld's imagination API: shapes, dtypes, both arms in one batch, seeded stochasticity."""

from __future__ import annotations

from dataclasses import asdict, replace

import numpy as np
import pytest
import torch
from torch import nn

from robocoach_skills.action_contract import ACTION_DIM
from robocoach_world.world.arm_sketch import SKETCH_CHANNELS
from robocoach_world.world.model import (
    CoachWorld,
    GripperModes,
    LossConfig,
    WorldConfig,
    WorldState,
    gripper_error,
)

SIZE = 32
TINY = WorldConfig(image_size=SIZE, channels=(8, 16), embed_dim=32, hidden_dim=32, latent_dim=4, robot_dim=4)
IDS = torch.tensor([0, 1, 1, 0])  # franka, piper, piper, franka


@pytest.fixture(scope="module")
def model() -> CoachWorld:
    torch.manual_seed(0)
    return CoachWorld(TINY).eval()


def _history(th: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (len(IDS), th, SIZE, SIZE, 3), dtype=torch.uint8, generator=g)
    proprio = torch.randn(len(IDS), th, ACTION_DIM, generator=g) * 0.3
    proprio[IDS == 1, :, 6] = 0.0  # the PiPER's unused slot
    return images, proprio


def _actions(k: int) -> torch.Tensor:
    actions = torch.randn(len(IDS), k, ACTION_DIM, generator=torch.Generator().manual_seed(1)) * 0.3
    actions[IDS == 1, :, 6] = 0.0
    return actions


@pytest.mark.parametrize(("th", "k"), [(1, 1), (2, 5)])
def test_observe_imagine_shapes_for_both_arms(model, th, k):
    state = model.observe(*_history(th), IDS)
    assert isinstance(state, WorldState)
    assert state.h.shape == (len(IDS), TINY.hidden_dim)
    state, frames, proprio = model.imagine(state, _actions(k), IDS, torch.Generator().manual_seed(0))
    assert frames.shape == (len(IDS), k, SIZE, SIZE, 3) and frames.dtype == torch.uint8
    assert proprio.shape == (len(IDS), k, ACTION_DIM) and proprio.dtype == torch.float32
    assert torch.all(proprio[IDS == 1, :, 6] == 0), "unused PiPER channel must stay zero"
    assert torch.all(proprio[IDS == 0, :, 6] != 0)
    assert not state.h.requires_grad and not frames.requires_grad
    # The returned state continues the rollout: another chunk from it works.
    _, more, _ = model.imagine(state, _actions(2), IDS)
    assert more.shape == (len(IDS), 2, SIZE, SIZE, 3)


def test_generators_decide_the_future(model):
    state = model.observe(*_history(2), IDS)
    actions = _actions(4)

    def rollout(seed: int):
        return model.imagine(state, actions, IDS, torch.Generator().manual_seed(seed))[1:]

    frames_a, proprio_a = rollout(3)
    frames_b, proprio_b = rollout(3)
    frames_c, proprio_c = rollout(4)
    assert torch.equal(frames_a, frames_b) and torch.equal(proprio_a, proprio_b)
    assert not torch.equal(frames_a, frames_c)
    assert not torch.allclose(proprio_a, proprio_c)
    # The first step already depends on the noise (z_0 is drawn before h_1).
    assert not torch.allclose(proprio_a[:, 0], proprio_c[:, 0])


def test_chunking_does_not_change_a_seeded_rollout(model):
    """K=4 at once equals 4 calls of K=1 with the same generator: the lead's loop may step one by one."""
    state = model.observe(*_history(1), IDS)
    actions = _actions(4)
    _, frames, proprio = model.imagine(state, actions, IDS, torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    steps = []
    for k in range(4):
        state, f, p = model.imagine(state, actions[:, k : k + 1], IDS, g)
        steps.append((f, p))
    torch.testing.assert_close(torch.cat([f for f, _ in steps], dim=1), frames, atol=1, rtol=0)
    torch.testing.assert_close(torch.cat([p for _, p in steps], dim=1), proprio)


def test_select_repeats_rows(model):
    state = model.observe(*_history(1), IDS)
    index = torch.tensor([2, 2, 0])
    picked = state.select(index)
    assert torch.equal(picked.h, state.h[index]) and torch.equal(picked.robot_ids, IDS[index])
    _, frames, _ = model.imagine(picked, _actions(2)[index], IDS[index])
    assert frames.shape[0] == 3


def test_bad_inputs_are_refused(model):
    images, proprio = _history(1)
    with pytest.raises(ValueError, match="uint8"):
        model.observe(images.float(), proprio, IDS)
    with pytest.raises(ValueError, match="proprio"):
        model.observe(images, proprio[..., :7], IDS)
    state = model.observe(images, proprio, IDS)
    with pytest.raises(ValueError, match="robot_ids"):
        model.imagine(state, _actions(1), torch.zeros_like(IDS))
    with pytest.raises(ValueError, match="actions"):
        model.imagine(state, _actions(1)[:2], IDS)


def test_config_is_validated():
    with pytest.raises(ValueError, match="image_size"):
        WorldConfig(image_size=30, channels=(8, 16))
    with pytest.raises(ValueError, match="channels"):
        WorldConfig(channels=(6, 16))
    with pytest.raises(ValueError, match="keys"):
        WorldConfig.from_dict({"image_size": 64})


def test_reduced_precision_frames_stay_close_and_leave_proprio_and_state_exact(model):
    state = model.observe(*_history(2), IDS)
    full = model.imagine(state, _actions(3), IDS, torch.Generator().manual_seed(0))
    fast = model.imagine(state, _actions(3), IDS, torch.Generator().manual_seed(0), torch.bfloat16)
    assert torch.equal(full[0].h, fast[0].h) and torch.equal(full[2], fast[2])
    difference = (full[1].int() - fast[1].int()).abs()
    assert fast[1].dtype == torch.uint8 and difference.float().mean() < 1.0 and difference.max() <= 8


def test_decoder_with_precomputed_skip_terms_equals_convolving_the_concatenation(model):
    # the reference: every stage's own layers on [x, skip], plus its sketch conv on [sketch, context sketch]
    decoder = model.decoder
    pool = lambda m, side: nn.functional.avg_pool2d(m, SIZE // 2 // side)  # noqa: E731
    with torch.no_grad():
        frame = torch.rand(len(IDS), 3, SIZE, SIZE)
        sketch, context_sketch = torch.rand(2, len(IDS), SKETCH_CHANNELS, SIZE // 2, SIZE // 2)
        _, skips = model.encoder(frame)
        h = torch.randn(len(IDS), TINY.hidden_dim)
        x = decoder.inp(h).view(len(IDS), -1, decoder.side, decoder.side)
        reversed_skips = tuple(reversed(skips))
        for i, (stage, skip) in enumerate(zip(decoder.stages, reversed_skips, strict=False)):
            pre = stage[0](torch.cat([x, skip], dim=1))
            sketches = torch.cat([sketch, context_sketch], dim=1)
            x = stage[2](stage[1](pre + decoder.sketch_convs[i](pool(sketches, pre.shape[-1]))))
        out = decoder.head(torch.cat([x, reversed_skips[-1]], dim=1))  # the head reads no sketch
        mask = torch.sigmoid(out[:, 3:])
        reference = mask * torch.sigmoid(out[:, :3]) + (1 - mask) * frame
        terms = decoder.skip_terms(skips, context_sketch)
        decoded = decoder(h, frame, terms, sketch)
    assert len(terms) == len(TINY.channels)
    torch.testing.assert_close(decoded, reference, atol=1e-5, rtol=1e-5)


def test_without_arm_sketches_the_model_builds_no_sketch_convs_and_still_imagines():
    torch.manual_seed(0)
    plain = CoachWorld(WorldConfig(**{**TINY.__dict__, "arm_sketch": False})).eval()
    assert plain.sketch is None and len(plain.decoder.sketch_convs) == 0
    _, frames, proprio = plain.imagine(plain.observe(*_history(2), IDS), _actions(3), IDS)
    assert frames.shape == (len(IDS), 3, SIZE, SIZE, 3) and proprio.shape == (len(IDS), 3, ACTION_DIM)


def test_the_decoded_frame_follows_the_sketched_arm(model):
    """Same hidden state, different arm poses: the frames differ (the sketch reaches the pixels)."""
    state = model.observe(*_history(1), IDS)
    actions = _actions(1)
    moved = actions.clone()
    moved[:, :, 1] += 0.6  # shoulder joint of both arms
    _, frames, _ = model.imagine(state, actions, IDS, torch.Generator().manual_seed(0))
    _, frames_moved, _ = model.imagine(state, moved, IDS, torch.Generator().manual_seed(0))
    assert (frames.float() - frames_moved.float()).abs().amax() > 0


def test_the_gripper_reading_is_weighed_apart_from_the_joints(model):
    """A cube held between the fingers shows only in the gripper reading: its error has its own weight."""
    images, proprio = _history(2)
    k = 3
    batch = {
        "history_images": images, "history_proprio": proprio, "actions": _actions(k),
        "future_images": _history(k, seed=1)[0], "future_proprio": _history(k, seed=2)[1],
        "valid": torch.ones(len(IDS), k), "robot_id": IDS,
    }  # fmt: skip

    def loss(batch: dict, **weights: float) -> tuple[float, dict]:
        torch.manual_seed(0)  # the same posterior samples every call
        total, parts = model(batch, LossConfig(vary_history=False, **weights))
        return total.item(), parts

    plain, parts = loss(batch, gripper_weight=0.0)
    weighed, _ = loss(batch, gripper_weight=0.5)
    assert weighed - plain == pytest.approx(0.5 * parts["gripper_mse"], rel=1e-4)
    held = dict(batch, future_proprio=batch["future_proprio"].clone())
    held["future_proprio"][..., -1] += 0.45  # only the reading differs: the joints' term stays
    _, moved = loss(held, gripper_weight=0.5)
    assert moved["joint_mse"] == pytest.approx(parts["joint_mse"], rel=1e-4)
    assert moved["gripper_mse"] != pytest.approx(parts["gripper_mse"], rel=1e-2)


def test_a_rollout_s_draw_picks_its_gripper_mode_and_keeps_it(model):
    """The reading is the blocked mode where the row's draw is below p_blocked, else the free one; the
    joints do not depend on it, and the draw made at the first call stays with the rollout."""
    state = model.observe(*_history(1), IDS)
    actions = _actions(3)
    rows = torch.ones(len(IDS))

    def imagine(draw: torch.Tensor | None, seed: int = 0):
        return model.imagine(
            replace(state, grasp_draw=draw), actions, IDS, torch.Generator().manual_seed(seed)
        )

    _, _, blocked = imagine(0 * rows)  # 0 < any p_blocked
    _, _, free = imagine(rows)  # 1 > any p_blocked
    torch.testing.assert_close(blocked[..., :-1], free[..., :-1])
    assert not torch.allclose(blocked[..., -1], free[..., -1])
    after, _, _ = imagine(None, seed=0)
    again, _, _ = model.imagine(after, actions, IDS, torch.Generator().manual_seed(9))
    other, _, _ = imagine(None, seed=1)
    assert after.grasp_draw.shape == (len(IDS),) and torch.equal(again.grasp_draw, after.grasp_draw)
    assert not torch.equal(other.grasp_draw, after.grasp_draw)
    assert torch.equal(after.select(torch.tensor([3, 0])).grasp_draw, after.grasp_draw[[3, 0]])


def test_gripper_error_against_hand_computed_values():
    """2 std^2 x the mixture's negative log-likelihood: squared error when one mode is sure; a 50/50
    mixture with the right reading in one mode costs 2 std^2 ln 2."""
    loss = LossConfig(gripper_std=0.05)
    target = torch.tensor([[[0.0] * 7 + [0.45]]])  # (1, 1, 8)

    def error(p: float, blocked: float, free: float) -> float:
        modes = GripperModes(torch.tensor([[p]]), torch.tensor([[blocked]]), torch.tensor([[free]]))
        return gripper_error(target, modes, target, loss).item()

    assert error(0.0, 0.9, 0.15) == pytest.approx(0.3**2, abs=1e-6)  # free mode only, 0.3 off
    assert error(1.0, 0.45, 0.0) == pytest.approx(0.0, abs=1e-6)  # blocked mode only, right
    assert error(0.5, 0.45, 0.0) == pytest.approx(2 * 0.05**2 * np.log(2), rel=1e-4)
    plain = torch.tensor([[[0.0] * 7 + [0.25]]])
    assert gripper_error(plain, None, target, loss).item() == pytest.approx(0.2**2)


def test_checkpoints_without_gripper_modes_build_the_regressed_reading():
    values = asdict(TINY)
    del values["gripper_modes"]
    config = WorldConfig.from_dict(values)
    assert not config.gripper_modes and CoachWorld(config).grasp is None
    old = CoachWorld(config).eval()
    state, _, _ = old.imagine(old.observe(*_history(1), IDS), _actions(1), IDS)
    assert state.grasp_draw is None
