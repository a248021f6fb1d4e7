"""Training: updates touch only their skill, losses really fall, baselines train on the same batches."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from expert_helpers import clone_state, cpu_state, synthetic_batch

from robocoach_skills.constants import OBS_IMAGE
from robocoach_skills.experts import (
    EndToEndPolicy,
    ExpertLibrary,
    SharedAdapterPolicy,
    SkillConditionedPolicy,
    pretrain,
    save_loss_curve,
    update_adapter,
)

ROBOTS8 = ("franka", "piper") * 4
ROBOTS16 = ROBOTS8 * 2
MIXED_SKILLS = ("pick", "place") * 4
LEARN_STEPS = 300  # steps of the learning checks (batch 16, ~1 s on one core)
MAP_A, MAP_B = 1234, 77  # seeds of two synthetic skills' proprio -> action mappings


def _batches(config, n, seed=0, skills=None, robots=ROBOTS8):
    return [synthetic_batch(config, robots, seed=seed + i, skills=skills) for i in range(n)]


def test_update_changes_only_that_skills_adapter_and_head(config):
    lib = ExpertLibrary(config, skills=("pick", "place"))
    pretrain(lib, _batches(config, 2, skills=MIXED_SKILLS), steps=3, progress=False)  # heads leave zero
    before = clone_state(lib)
    flags = {n: p.requires_grad for n, p in lib.named_parameters()}

    # Mixed-skill batches: the update must keep only the "pick" rows.
    update_adapter(lib, "pick", _batches(config, 2, seed=10, skills=MIXED_SKILLS), steps=6, progress=False)

    after = cpu_state(lib.state_dict())
    own = {f"adapters.pick.{k}" for k in lib.adapters["pick"].state_dict()}
    own |= {f"heads.pick.{k}" for k in lib.heads["pick"].state_dict()}
    assert own and set(after) == set(before)
    for name, tensor in after.items():
        if name in own:
            assert not torch.equal(tensor, before[name]), f"{name} should have been trained"
        else:
            assert torch.equal(tensor, before[name]), f"{name} changed during the pick update"
    assert {n: p.requires_grad for n, p in lib.named_parameters()} == flags


def test_unfrozen_backbone_is_trained_too(config):
    config.freeze_backbone = False
    lib = ExpertLibrary(config, skills=("pick",))
    pretrain(lib, _batches(config, 1), steps=2, progress=False)
    before = clone_state(lib.backbone)
    update_adapter(lib, "pick", _batches(config, 1), steps=2, progress=False)
    assert not torch.equal(lib.backbone.fuse.weight.cpu(), before["fuse.weight"])


def _held_out_parts(lib, skill, config, map_seed):
    batches = [synthetic_batch(config, ROBOTS16, seed=10_000 + i, map_seed=map_seed) for i in range(4)]
    with torch.no_grad():
        parts = [lib(b, skill)[1] for b in batches]
    return {k: sum(p[k] for p in parts) / len(parts) for k in ("action_l1", "done_bce")}


def _fresh_batches(config, n, map_seed, first_seed=0):
    """n never-repeated batches: the model cannot memorise, only learn the mapping."""
    return [synthetic_batch(config, ROBOTS16, seed=first_seed + i, map_seed=map_seed) for i in range(n)]


def test_pretraining_learns_a_proprio_to_action_mapping(config):
    # Random frames have no landmarks; this is about the proprio mapping, a map in joint space.
    config.argument_keypoints = config.keypoint_skip = False
    config.action_space = "joint"
    lib = ExpertLibrary(config, skills=("pick",))
    start = _held_out_parts(lib, "pick", config, MAP_A)
    metrics, losses = pretrain(lib, _fresh_batches(config, LEARN_STEPS, MAP_A), LEARN_STEPS, progress=False)
    end = _held_out_parts(lib, "pick", config, MAP_A)
    assert len(losses) == LEARN_STEPS and metrics["train/steps"] == LEARN_STEPS
    assert metrics["train/loss_last"] < 0.3 * metrics["train/loss_first"]
    assert end["action_l1"] < 0.4 * start["action_l1"], (start, end)  # measured ~0.2
    assert end["done_bce"] < 0.4 * start["done_bce"], (start, end)  # measured ~0.2


def test_adapter_update_alone_learns_a_new_skill_on_the_frozen_backbone(config):
    config.action_space = "joint"  # the synthetic skills are maps in joint space
    lib = ExpertLibrary(config, skills=("pick",))
    pretrain(lib, _fresh_batches(config, LEARN_STEPS, MAP_A), LEARN_STEPS, progress=False)
    lib.add_skill("push")  # a different mapping the backbone never saw
    start = _held_out_parts(lib, "push", config, MAP_B)
    batches = _fresh_batches(config, LEARN_STEPS, MAP_B, first_seed=50_000)
    metrics, _ = update_adapter(lib, "push", batches, LEARN_STEPS, progress=False)
    end = _held_out_parts(lib, "push", config, MAP_B)
    assert metrics["train/trained_params"] == sum(p.numel() for p in lib.adapter_parameters("push"))
    assert end["action_l1"] < 0.6 * start["action_l1"], (start, end)  # measured ~0.33
    assert end["done_bce"] < 0.5 * start["done_bce"], (start, end)  # measured ~0.2


def test_by_default_an_update_moves_only_its_own_skills_keypoints(config):
    """Every backbone layer gets LoRA by default, convolutions included (docs/skills.md): an update
    changes what its skill sees, while the backbone and every other skill see what they saw."""
    config = replace(config, lora_layers=None)
    assert config.lora_layers == config.backbone_layer_names()
    lib = ExpertLibrary(config, skills=("pick", "place"))
    before = clone_state(lib)
    update_adapter(lib, "pick", _batches(config, 2, seed=10), steps=6, progress=False)
    after = cpu_state(lib.state_dict())
    changed = {k for k in before if not torch.equal(after[k], before[k])}
    assert {k for k in changed if ".layers.conv" in k}, changed  # the conv LoRA trained
    assert all(k.startswith(("adapters.pick.", "heads.pick.")) for k in changed), changed
    images = synthetic_batch(config, ROBOTS8, seed=99)[OBS_IMAGE]
    with torch.no_grad():
        plain = lib.backbone.vision(images)[0]
        place, pick = (lib.backbone.vision(images, lib.adapter(s))[0] for s in ("place", "pick"))
    assert torch.equal(plain, place)  # place's conv LoRA is still the identity
    assert not torch.equal(plain, pick)


def test_dense_steps_go_on_training_the_dense_layers_on_the_vision_the_first_steps_left(config):
    """An update's dense steps read each frame's vision computed once (KEY_VISION): the conv LoRA ends
    where the full steps left it, the dense LoRA and head train on, and the loss keeps falling."""
    config = replace(config, lora_layers=None, action_space="joint")
    lib = ExpertLibrary(config, skills=("pick",))
    pretrain(lib, _fresh_batches(config, 20, MAP_A), 20, progress=False)
    lib.add_skill("place")
    start = clone_state(lib)
    batches = _fresh_batches(config, 4, MAP_B, first_seed=50_000)
    update_adapter(lib, "pick", batches, steps=3, progress=False)
    full_only = clone_state(lib)
    lib.load_state_dict(start)
    metrics, losses = update_adapter(
        lib, "pick", batches, steps=3, progress=False, dense_steps=LEARN_STEPS, dense_batch_size=16
    )
    after = cpu_state(lib.state_dict())
    convs = {k for k in after if ".layers.conv" in k}
    assert convs and all(torch.equal(after[k], full_only[k]) for k in convs)
    dense = {k for k in after if k.startswith(("adapters.pick.", "heads.pick.")) and k not in convs}
    assert dense and not [k for k in dense if torch.equal(after[k], full_only[k])]
    assert all(
        torch.equal(after[k], start[k]) for k in after if not k.startswith(("adapters.pick.", "heads.pick."))
    )
    assert len(losses) == 3 + LEARN_STEPS and metrics["train_dense/steps"] == LEARN_STEPS
    conv_params = sum(
        p.numel() for n in config.conv_lora_layers for p in lib.adapter("pick").layers[n].parameters()
    )
    assert metrics["train_dense/trained_params"] == metrics["train/trained_params"] - conv_params
    assert metrics["train_dense/loss_last"] < 0.5 * metrics["train/loss_last"], metrics
    with pytest.raises(ValueError, match="shift_pixels"):
        lib.config.shift_pixels = 2
        update_adapter(lib, "pick", batches, steps=1, progress=False, dense_steps=1)


def test_update_needs_rows_of_its_skill(config):
    lib = ExpertLibrary(config, skills=("pick", "place"))
    only_place = _batches(config, 1, skills=("place",) * len(ROBOTS8))
    with pytest.raises(ValueError, match="'pick'"):
        update_adapter(lib, "pick", only_place, steps=1, progress=False)


@pytest.mark.parametrize("policy_cls", [SkillConditionedPolicy, SharedAdapterPolicy, EndToEndPolicy])
def test_baselines_train_on_the_same_batches(config, policy_cls):
    policy = policy_cls(config, ("pick", "place"))
    batch = synthetic_batch(config, ROBOTS8)
    loss, _ = policy(batch, "pick")
    loss.backward()
    grads = [p.grad for p in policy.adapter_parameters("pick") if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
    policy.zero_grad(set_to_none=True)

    pretrain(policy, _batches(config, 2, skills=MIXED_SKILLS), steps=2, progress=False)
    before = clone_state(policy)
    update_adapter(policy, "pick", _batches(config, 1), steps=2, progress=False)
    changed = {n for n, t in cpu_state(policy.state_dict()).items() if not torch.equal(t, before[n])}
    trained = {
        n for n, p in policy.named_parameters() if any(p is q for q in policy.adapter_parameters("pick"))
    }
    if not config.freeze_backbone:
        trained |= {n for n, _ in policy.named_parameters() if "backbone" in n}
    assert changed and changed <= trained
    chunk, done = policy.select_action(batch, "place")
    assert chunk.shape == (len(ROBOTS8), config.chunk_len, 8) and done.shape == (len(ROBOTS8),)


def test_loss_curve_is_a_png(tmp_path):
    path = save_loss_curve([1.0 / (i + 1) for i in range(50)], tmp_path / "curves" / "pick.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
