"""Judge checkpoints: the shared safetensors format plus what it takes to rebuild the same judge.

A judge directory (what `train` writes and the node, the router detector and imagination load):

    <judge>/checkpoint/      weights + meta (config, version, vocabularies, done rule, metrics)
    <judge>/deadlines.json   per-(arm, skill) deadlines, frozen after calibration (see verdict.Deadlines)

Loading refuses, with CheckpointError naming the reason, anything that would silently judge with
the wrong model: another kind of checkpoint, another JUDGE_VERSION, other skill/argument/arm
vocabularies (embedding ids would mean other things), or tensors that do not fit the config.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from robocoach_skills.checkpoint import CheckpointError, check_fits, load_checkpoint, save_checkpoint
from robocoach_skills.constants import ROBOTS, SUBTASK_ARGUMENTS
from robocoach_world.judge.model import JUDGE_VERSION, JudgeConfig, ProgressJudge, skill_vocabulary
from robocoach_world.judge.verdict import VerdictConfig

KIND = "progress_judge"
CHECKPOINT_DIR = "checkpoint"
DEADLINES_FILE = "deadlines.json"


def _vocabularies() -> dict[str, list[str]]:
    return {"skills": list(skill_vocabulary()), "arguments": list(SUBTASK_ARGUMENTS), "robots": list(ROBOTS)}


def save_judge(root: Path, judge: ProgressJudge, verdict: VerdictConfig, metrics: dict) -> Path:
    """Write `judge` to `root`/checkpoint with its config, done rule and training metrics."""
    meta = {
        "kind": KIND,
        "judge_version": JUDGE_VERSION,
        "config": asdict(judge.config),
        "verdict": asdict(verdict),
        "vocabularies": _vocabularies(),
        "metrics": metrics,
    }
    return save_checkpoint(Path(root) / CHECKPOINT_DIR, judge.state_dict(), meta)


def load_judge(root: Path, device: torch.device | str = "cpu") -> tuple[ProgressJudge, VerdictConfig, dict]:
    """(judge in eval mode on `device`, its done rule, the checkpoint meta) from a judge directory."""
    directory = Path(root) / CHECKPOINT_DIR
    tensors, meta = load_checkpoint(directory, kind=KIND)
    if meta.get("judge_version") != JUDGE_VERSION:
        raise CheckpointError(
            f"{directory} is judge version {meta.get('judge_version')!r}; this code reads {JUDGE_VERSION}"
        )
    if meta.get("vocabularies") != _vocabularies():
        raise CheckpointError(
            f"{directory} was trained with vocabularies {meta.get('vocabularies')}, "
            f"but this code has {_vocabularies()}: its embedding ids would mean other things"
        )
    try:
        config = JudgeConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in meta["config"].items()})
        verdict = VerdictConfig(**meta["verdict"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{directory} has an unusable config: {e}") from e
    judge = ProgressJudge(config)
    check_fits(directory, judge.state_dict(), tensors)
    judge.load_state_dict(tensors)
    return judge.to(device).eval(), verdict, meta
