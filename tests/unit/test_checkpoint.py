"""The shared checkpoint format: bit-identical round trip, and loud refusal of anything wrong."""

import json

import pytest
import torch

from robocoach_skills.checkpoint import (
    META_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    check_fits,
    load_checkpoint,
    save_checkpoint,
)


def _tensors() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {"a.weight": torch.randn(3, 4, generator=gen), "b.bias": torch.randn(5, generator=gen)}


def test_round_trip_is_bit_identical(tmp_path):
    path = save_checkpoint(tmp_path / "v1", _tensors(), {"kind": "judge", "config": {"width": 4}})
    tensors, meta = load_checkpoint(path, kind="judge")
    for name, value in _tensors().items():
        assert torch.equal(tensors[name], value)
    assert meta["config"] == {"width": 4}
    assert meta["tensors"] == {"a.weight": [3, 4], "b.bias": [5]}


def test_existing_directory_is_never_overwritten(tmp_path):
    save_checkpoint(tmp_path / "v1", _tensors(), {"kind": "judge"})
    with pytest.raises(FileExistsError):
        save_checkpoint(tmp_path / "v1", _tensors(), {"kind": "judge"})


def test_reserved_meta_fields_are_refused(tmp_path):
    with pytest.raises(ValueError, match="reserved"):
        save_checkpoint(tmp_path / "v1", _tensors(), {"sha256": "x"})


def test_flipped_byte_is_refused(tmp_path):
    path = save_checkpoint(tmp_path / "v1", _tensors(), {"kind": "judge"})
    data = bytearray((path / WEIGHTS_FILE).read_bytes())
    data[-1] ^= 0xFF
    (path / WEIGHTS_FILE).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(path)


def test_wrong_kind_missing_files_and_unknown_format_are_refused(tmp_path):
    path = save_checkpoint(tmp_path / "v1", _tensors(), {"kind": "world"})
    with pytest.raises(CheckpointError, match="'world' checkpoint, not a 'judge'"):
        load_checkpoint(path, kind="judge")
    meta = json.loads((path / META_FILE).read_text())
    (path / META_FILE).write_text(json.dumps({**meta, "format_version": 99}))
    with pytest.raises(CheckpointError, match="format_version 99"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="unreadable"):
        load_checkpoint(tmp_path / "missing")


def test_check_fits_names_every_mismatch(tmp_path):
    expected = _tensors()
    got = {"a.weight": torch.zeros(4, 3), "c": torch.zeros(1)}
    with pytest.raises(CheckpointError) as error:
        check_fits(tmp_path, expected, got)
    message = str(error.value)
    assert "missing tensor 'b.bias'" in message
    assert "unexpected tensor 'c'" in message
    assert "a.weight: expected (3, 4)" in message
