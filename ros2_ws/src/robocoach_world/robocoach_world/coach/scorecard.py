"""The operator scorecard: what a person needs to trust a demo request, as markdown and as a JSON dict.

Per (subtask, expert) pair: imagined success when reached, reach count, first-timeout mass, where the
failures concentrate and the demos requested; per composition: its route (subtask -> expert version)
and imagined success with a Wilson interval; and, when frames are given, representative imagined
failure clips: a PNG strip of frames with the judge's progress trace plotted under it.

    markdown, data = scorecard(diagnosis, allocation, clips, out_dir=report_dir)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from robocoach_world.coach.allocation import Allocation
from robocoach_world.coach.diagnosis import Diagnosis, Pair

CLIP_DIR = "clips"  # under out_dir


@dataclass(frozen=True)
class ScorecardConfig:
    strip_frames: int = 8  # frames shown per clip strip, evenly spaced
    clips_per_pair: int = 2  # at most this many clips shown per pair
    dpi: int = 100  # of the clip PNGs

    def __post_init__(self) -> None:
        if self.strip_frames < 1 or self.clips_per_pair < 1 or self.dpi < 1:
            raise ValueError(f"ScorecardConfig fields must be >= 1, got {self}")


@dataclass(frozen=True)
class FailureClip:
    """An imagined rollout that first timed out at `pair`, with the judge's view of it."""

    pair: Pair
    composition: str
    seed: int  # initial-state seed
    frames: np.ndarray  # (T, H, W, 3) uint8 imagined frames
    trace: np.ndarray  # (T,) judged progress of the judged-active subtask
    active: np.ndarray | None = None  # (T,) judged-active subtask index; marks subtask switches

    def __post_init__(self) -> None:
        if self.frames.ndim != 4 or self.frames.shape[-1] != 3 or len(self.trace) != len(self.frames):
            raise ValueError(
                f"need (T, H, W, 3) frames and a (T,) trace, "
                f"got {self.frames.shape} and {np.shape(self.trace)}"
            )


def write_clip_strip(clip: FailureClip, path: Path, config: ScorecardConfig | None = None) -> Path:
    """PNG: `strip_frames` evenly spaced frames side by side, the progress trace below them."""
    config = config or ScorecardConfig()
    n_frames = len(clip.frames)
    shown = np.unique(np.linspace(0, n_frames - 1, min(config.strip_frames, n_frames)).round().astype(int))
    strip = np.concatenate(list(clip.frames[shown]), axis=1)  # (H, k * W, 3)
    fig = Figure(figsize=(1.2 * len(shown) + 1, 3.2))
    top, bottom = fig.subplots(2, 1, height_ratios=(2, 1))
    top.imshow(strip)
    top.set_axis_off()
    top.set_title(f"{clip.pair} in {clip.composition}, seed {clip.seed}", fontsize=9)
    bottom.plot(np.arange(n_frames), clip.trace, color="tab:red")
    for t in shown:
        bottom.axvline(t, color="0.8", linewidth=0.8)
    if clip.active is not None:
        for t in np.flatnonzero(np.diff(clip.active)) + 1:
            bottom.axvline(t, color="tab:blue", linestyle="--", linewidth=1.0)
    bottom.set(xlim=(0, max(1, n_frames - 1)), ylim=(0, 1.05), xlabel="frame", ylabel="judged progress")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=config.dpi)
    return path


def scorecard(
    diagnosis: Diagnosis,
    allocation: Allocation | dict | None = None,
    clips: Sequence[FailureClip] = (),
    out_dir: Path | None = None,
    config: ScorecardConfig | None = None,
) -> tuple[str, dict]:
    """(markdown section, JSON-able dict); clip PNGs go to out_dir/clips (needs out_dir with clips).

    `allocation` may be an Allocation or its `to_dict()` form (as the coach state keeps it).
    """
    config = config or ScorecardConfig()
    if isinstance(allocation, Allocation):
        allocation = allocation.to_dict()
    if clips and out_dir is None:
        raise ValueError("clips need an out_dir to write their PNG strips to")
    requested = {d["pair"]: d["n_demos"] for d in allocation["demos"]} if allocation else {}
    data = diagnosis.to_dict()
    for p in data["pairs"]:
        p["requested_demos"] = requested.get(p["pair"], 0)
    data["allocation"] = allocation or None
    data["clips"] = _write_clips(clips, Path(out_dir) if out_dir else None, config)

    lines = [
        "| pair | expert | success when reached | reached | first-timeout mass "
        "| failures concentrate at | demos |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in data["pairs"]:
        rate = "-" if p["success_rate"] is None else f"{p['success_rate']:.0%}"
        reached = f"{p['reached']}" + ("" if p["eligible"] else " (too few)")
        sites = ", ".join(f"{s['composition']} seed {s['seed']} ({s['failures']}x)" for s in p["sites"])
        lines.append(
            f"| {p['pair']} | {p['expert']} | {rate} | {reached} | {p['mass']:.3f} | {sites or '-'} "
            f"| {p['requested_demos']} |"
        )
    lines += [
        "",
        "| robot | composition | route | imagined success (95% CI) | valid trials |",
        "|---|---|---|---|---|",
    ]
    for c in data["compositions"]:
        rate = "-" if c["success_rate"] is None else f"{c['success_rate']:.0%}"
        ci = f" [{c['interval'][0]:.0%}, {c['interval'][1]:.0%}]" if c["interval"] else ""
        lines.append(
            f"| {c['robot']} | {c['composition']} | {'; '.join(c['route'])} | {rate}{ci} | {c['trials']} |"
        )
    if allocation:
        lines += ["", f"Allocation: {allocation['note']}"]
    if data["clips"]:
        lines += ["", "Representative imagined failures (frames; judged progress below):", ""]
        lines += [
            f"![{c['pair']} in {c['composition']}, seed {c['seed']}]({c['path']})" for c in data["clips"]
        ]
    return "\n".join(lines), data


def _write_clips(clips: Sequence[FailureClip], out_dir: Path | None, config: ScorecardConfig) -> list[dict]:
    written, per_pair = [], {}
    for clip in clips:
        shown = per_pair.get(clip.pair, 0)
        if shown >= config.clips_per_pair:
            continue
        per_pair[clip.pair] = shown + 1
        name = (
            f"{CLIP_DIR}/clip_{len(written):03d}_{clip.pair.robot}_{clip.pair.expert}_{clip.composition}.png"
        )
        write_clip_strip(clip, out_dir / name, config)
        written.append(
            {"pair": str(clip.pair), "composition": clip.composition, "seed": clip.seed, "path": name}
        )
    return written
