"""Judge checkpoints round-trip exactly, and anything corrupt or mismatched is refused loudly."""

from __future__ import annotations

import json

import pytest
import torch

from robocoach_skills.checkpoint import META_FILE, WEIGHTS_FILE, CheckpointError
from robocoach_skills.composition import Subtask
from robocoach_world.judge.checkpoint import CHECKPOINT_DIR, load_judge, save_judge
from robocoach_world.judge.model import JudgeConfig, ProgressJudge
from robocoach_world.judge.verdict import VerdictConfig

CONFIG = JudgeConfig(image_size=16, channels=(8, 8), feature_dim=8, embed_dim=2, hidden_dim=8)
VERDICT = VerdictConfig(threshold=0.8, consecutive=3)


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    judge = ProgressJudge(CONFIG)
    save_judge(tmp_path / "judge", judge, VERDICT, {"val_mae": 0.1})
    return tmp_path / "judge", judge


def _outputs(judge: ProgressJudge) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    frames = torch.randint(0, 256, (1, 5, 16, 16, 3), dtype=torch.uint8, generator=generator)
    proprio = torch.rand(1, 5, 8, generator=generator)
    with torch.no_grad():
        return judge(frames, judge.condition(["piper"], [Subtask("pick", "red_cube")]), proprio=proprio)[0]


def test_round_trip_gives_the_same_judge_and_rule(saved):
    root, judge = saved
    loaded, verdict, meta = load_judge(root)
    assert verdict == VERDICT and loaded.config == CONFIG and meta["metrics"]["val_mae"] == 0.1
    torch.testing.assert_close(_outputs(loaded), _outputs(judge.eval()))
    with pytest.raises(FileExistsError):
        save_judge(root, judge, VERDICT, {})  # checkpoints are immutable


def test_corrupt_weights_are_refused(saved):
    root, _ = saved
    weights = root / CHECKPOINT_DIR / WEIGHTS_FILE
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupt"):
        load_judge(root)


def test_missing_checkpoint_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="unreadable"):
        load_judge(tmp_path / "nothing")


def _edit_meta(root, edit) -> None:
    path = root / CHECKPOINT_DIR / META_FILE
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(kind="world_model"), "not a 'progress_judge'"),
        (lambda m: m.update(judge_version=99), "judge version 99"),
        (lambda m: m["vocabularies"]["skills"].reverse(), "vocabularies"),
        (lambda m: m["config"].update(hidden_dim=16), "does not fit"),
        (lambda m: m["config"].update(channels=[8, 8, 8, 8, 8]), "unusable config"),
    ],
)
def test_mismatched_checkpoints_are_refused(saved, edit, message):
    root, _ = saved
    _edit_meta(root, edit)
    with pytest.raises(CheckpointError, match=message):
        load_judge(root)
