"""The expert model: identity of fresh adapters, padding/masking across arms, action decoding."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from expert_helpers import randomize_, synthetic_batch

from robocoach_skills.action_contract import ACTION_DIM
from robocoach_skills.experts import ExpertConfig, ExpertLibrary, UnknownSkillError
from robocoach_skills.experts.model import split_by_skill

MIXED = ("franka", "piper", "franka", "piper", "piper", "franka")
PIPER_PAD = 6  # the padded joint slot of the 6-joint arm


def test_fresh_adapter_is_the_identity(config):
    lib = ExpertLibrary(config, skills=("pick",))
    randomize_([*lib.backbone_parameters(), *lib.heads["pick"].parameters()])  # a "trained" backbone + head
    batch = synthetic_batch(config, MIXED)

    bare = lib.heads["pick"](lib.head_features(lib.backbone, batch, adapter=None))
    with_fresh = lib.predict(batch, "pick")
    assert all(torch.equal(a, b) for a, b in zip(bare, with_fresh, strict=True))

    with torch.no_grad():  # control: a non-zero B must change the output
        lib.adapter("pick").layers["fuse"].B.normal_()
    assert not torch.equal(lib.predict(batch, "pick")[0], bare[0])


def test_padded_channels_and_steps_past_the_end_do_not_count(config):
    lib = ExpertLibrary(config, skills=("pick",))
    randomize_(lib.parameters())
    batch = synthetic_batch(config, MIXED)
    loss, _ = lib(batch, "pick")

    piper_rows = batch["robot_id"] == 1
    padded = {**batch, "action_chunk": batch["action_chunk"].clone()}
    padded["action_chunk"][piper_rows, :, PIPER_PAD] += 5.0
    assert torch.equal(lib(padded, "pick")[0], loss)

    past_end = {**batch, "action_chunk": batch["action_chunk"].clone()}
    past_end["action_chunk"][batch["action_mask"] == 0] += 5.0
    assert torch.equal(lib(past_end, "pick")[0], loss)

    real = {**batch, "action_chunk": batch["action_chunk"].clone()}  # control: a real channel counts
    real["action_chunk"][piper_rows, :, PIPER_PAD - 1] += 5.0
    assert not torch.equal(lib(real, "pick")[0], loss)


def test_select_action_shapes_padding_and_hold_still(config):
    config.action_space = "joint"  # random proprio is no top-down pose (hand space: test_hand_space_actions)
    lib = ExpertLibrary(config, skills=("pick",))
    batch = synthetic_batch(config, MIXED)
    chunk, done = lib.select_action(batch, "pick")
    assert chunk.shape == (len(MIXED), config.chunk_len, ACTION_DIM) and done.shape == (len(MIXED),)
    # A fresh head outputs zero deltas: every step of the chunk holds the current position ...
    assert torch.equal(chunk, batch["proprio"][:, None, :].expand_as(chunk))
    # ... and says "not done" with the configured prior.
    assert torch.allclose(done, torch.sigmoid(torch.tensor(config.done_bias_init)).expand(len(MIXED)))

    randomize_(lib.heads["pick"].parameters())
    chunk, done = lib.select_action(batch, "pick")
    assert torch.all(chunk[batch["robot_id"] == 1, :, PIPER_PAD] == 0)  # padded slot exactly 0
    assert torch.all(chunk[batch["robot_id"] == 0, :, PIPER_PAD] != 0)
    assert torch.all((done > 0) & (done < 1))
    assert lib.training, "select_action must restore the training mode"


def test_default_config_runs_64x64_frames():
    cfg = ExpertConfig()
    lib = ExpertLibrary(cfg, skills=("pick",))
    batch = synthetic_batch(cfg, ("franka", "piper"))
    loss, parts = lib(batch, "pick")
    loss.backward()
    assert set(parts) == {"loss", "action_l1", "done_bce"} and torch.isfinite(loss)


def test_unknown_skill_names_known_ones(config):
    lib = ExpertLibrary(config, skills=("pick", "place"))
    with pytest.raises(UnknownSkillError, match=r"'open_drawer'.*\['pick', 'place'\]"):
        lib.select_action(synthetic_batch(config, ("franka",)), "open_drawer")


def test_bad_inputs_are_clear_errors(config):
    lib = ExpertLibrary(config, skills=("pick",))
    with pytest.raises(ValueError, match="already exists"):
        lib.add_skill("pick")
    with pytest.raises(ValueError, match="'pick up'"):
        lib.add_skill("pick up")
    batch = synthetic_batch(config, ("franka",))
    with pytest.raises(ValueError, match=r"image must be \(B, 3, 32, 32\)"):
        lib(dict(batch, image=batch["image"].permute(0, 2, 3, 1)), "pick")


@pytest.mark.parametrize(
    ("field", "value"),
    [("lora_rank", 0), ("lora_layers", ("conv9",)), ("norm_groups", 5), ("lr", -1.0), ("conv_kernel", 4)],
)
def test_config_rejects_bad_values_quoting_them(field, value):
    with pytest.raises(ValueError, match=repr(value).replace("(", r"\(").replace(")", r"\)")):
        ExpertConfig(**{field: value})


def test_split_by_skill_accepts_names_and_indices(config):
    batch = synthetic_batch(config, MIXED, skills=("pick", "place", "pick", "pick", "place", "pick"))
    by_name = split_by_skill(batch, ("pick", "place"))
    by_index = split_by_skill(dict(batch, skill=torch.tensor([0, 1, 0, 0, 1, 0])), ("pick", "place"))
    assert list(by_name) == ["pick", "place"]
    for groups in (by_name, by_index):
        assert torch.equal(groups["place"]["proprio"], batch["proprio"][[1, 4]])
        assert len(groups["pick"]["robot_id"]) == 4


def test_experts_never_import_rclpy():
    code = "import sys, robocoach_skills.experts; sys.exit('rclpy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_random_shift_crops_a_replicate_padded_frame_per_sample():
    import torch.nn.functional as F  # noqa: N812

    from robocoach_skills.experts.model import random_shift

    torch.manual_seed(0)
    images = torch.rand(6, 3, 8, 8)
    shifted = random_shift(images, 2)
    padded = F.pad(images, (2, 2, 2, 2), mode="replicate")
    offsets = set()
    for b in range(6):
        matches = [
            (dy, dx)
            for dy in range(5)
            for dx in range(5)
            if torch.equal(shifted[b], padded[b, :, dy : dy + 8, dx : dx + 8])
        ]
        assert matches, f"frame {b} is not a crop of its padded frame"
        offsets.add(matches[0])
    assert len(offsets) > 1  # the shift is random per frame
    assert torch.equal(random_shift(images, 0), images)


def test_argument_direction_is_the_unit_vector_from_object_to_target(config):
    """With argument_direction the argument keypoints end with (target - object) / |target - object|,
    checked on keypoints set by hand; the features and the heads widen by those two numbers."""
    from dataclasses import replace

    from robocoach_skills.constants import ARGUMENT_LANDMARKS, LANDMARKS, SUBTASK_ARGUMENTS

    config, with_direction = (
        replace(config, argument_direction=False, argument_memory=False, argument_table=False),
        replace(config, argument_direction=True, argument_memory=False, argument_table=False),
    )
    assert with_direction.backbone_dim == config.backbone_dim + 2
    backbone = ExpertLibrary(with_direction, skills=("push",)).backbone
    c = len(LANDMARKS)
    x, y = torch.zeros(1, c), torch.zeros(1, c)
    cube, pad = LANDMARKS.index("red_cube"), LANDMARKS.index(ARGUMENT_LANDMARKS["pad"])
    x[0, cube], y[0, cube] = 0.1, 0.2
    x[0, pad], y[0, pad] = 0.4, -0.2  # 0.3 right, 0.4 down: a 3-4-5 triangle
    arguments = torch.tensor([[SUBTASK_ARGUMENTS.index("red_cube"), SUBTASK_ARGUMENTS.index("pad")]])
    offsets = backbone.argument_offsets(torch.cat([x, y], dim=1), arguments)
    assert offsets.shape == (1, with_direction.argument_dim) == (1, 10)
    assert torch.allclose(
        offsets[0, :8],
        ExpertLibrary(config, ("push",)).backbone.argument_offsets(torch.cat([x, y], dim=1), arguments)[0],
    )
    assert torch.allclose(offsets[0, 8:], torch.tensor([0.6, -0.8]))
    with pytest.raises(ValueError, match="argument_keypoints"):
        replace(config, argument_keypoints=False, keypoint_skip=False, argument_direction=True)


def test_argument_memory_is_where_object_and_target_were_at_the_start_relative_to_the_gripper_now(config):
    """With argument_memory the argument keypoints end with the object and target keypoints of the
    subtask's first frame minus the gripper's keypoint now; without a first frame the experts refuse."""
    from dataclasses import replace

    from robocoach_skills.constants import LANDMARKS, SUBTASK_ARGUMENTS

    config = replace(config, argument_table=False)
    backbone = ExpertLibrary(replace(config, argument_memory=True), skills=("pick",)).backbone
    without = ExpertLibrary(replace(config, argument_memory=False), skills=("pick",)).backbone
    c = len(LANDMARKS)
    cube, gripper = LANDMARKS.index("red_cube"), LANDMARKS.index("gripper")
    now, start = torch.zeros(1, 2 * c), torch.zeros(1, 2 * c)
    now[0, gripper], now[0, c + gripper] = 0.5, -0.25  # the gripper now; the cube now is hidden at (0, 0)
    start[0, cube], start[0, c + cube] = 0.2, 0.3  # where the cube was when the pick started
    start[0, gripper], start[0, c + gripper] = -0.9, -0.9  # the gripper then: not read
    arguments = torch.tensor([[SUBTASK_ARGUMENTS.index("red_cube"), 0]])  # pick red_cube: target none
    offsets = backbone.argument_offsets(now, arguments, start)
    assert (
        offsets.shape == (1, config.argument_dim)
        and config.argument_dim == without.argument_offsets(now, arguments).shape[1] + 4
    )
    # object then - gripper now; target "" names the gripper: gripper then - gripper now
    assert torch.allclose(offsets[0, -4:], torch.tensor([0.2 - 0.5, 0.3 + 0.25, -0.9 - 0.5, -0.9 + 0.25]))
    assert torch.equal(offsets[0, :-4], without.argument_offsets(now, arguments)[0])
    batch = synthetic_batch(config, ("franka",))
    with pytest.raises(ValueError, match="first frame"):
        backbone(batch["image"], batch["proprio"], batch["robot_id"], batch["arguments"])


def test_random_shift_moves_a_frame_and_its_subtask_start_together(config):
    from dataclasses import replace

    library = ExpertLibrary(replace(config, shift_pixels=2), skills=("pick",))
    image = torch.rand(5, 3, config.image_size, config.image_size)
    shifted = library._shifted({"image": image, "subtask_start_image": image.clone()})
    assert not torch.equal(shifted["image"], image)
    assert torch.equal(shifted["image"], shifted["subtask_start_image"])


def test_heads_read_the_argument_keypoints_past_the_shared_layers(config):
    """With keypoint_skip the features end with the object/target keypoints (and their offsets from the
    gripper's) exactly as vision computes them, whatever the fuse and trunk layers do."""
    lib = ExpertLibrary(config, skills=("pick",))
    with torch.no_grad():
        lib.backbone.trunk.weight.zero_()  # the shared path carries nothing ...
        lib.backbone.trunk.bias.zero_()
    batch = synthetic_batch(config, ("franka", "piper"))
    start, robot = batch["subtask_start_image"], batch["robot_id"]
    hand_xy = lib.hand_inputs(batch["proprio"], robot)[:, :2]
    features = lib.backbone(batch["image"], batch["proprio"], robot, batch["arguments"], None, start, hand_xy)
    keypoints, _ = lib.backbone.vision(batch["image"])
    start_keypoints = lib.backbone.vision(start)[0]
    skipped = lib.backbone.argument_offsets(keypoints, batch["arguments"], start_keypoints, robot, hand_xy)
    assert features.shape == (2, config.backbone_dim) == (2, config.embed_dim + skipped.shape[1])
    assert torch.equal(features[:, : config.embed_dim], torch.zeros(2, config.embed_dim))
    assert torch.equal(features[:, config.embed_dim :], skipped)  # ... and the heads still see the object
