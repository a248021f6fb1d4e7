"""The operator scorecard: what a person needs to trust a demo request, as markdown and as a JSON dict.

Per (subtask, expert) pair: imagined success when reached, reach count, first-timeout mass, where the
failures concentrate and the demos requested; per composition: its route (subtask -> expert version)
and imagined success with a Wilson interval; and representative imagined failure clips of the pairs
with the most first-timeout mass: a PNG strip of frames with the judge's progress trace under it and
the route of the trial.

    entries = write_clips(pick_clips(clips, config, diagnosis), round_dir, config)   # the PNGs
    markdown, data = scorecard(diagnosis, allocation, entries)      # links relative to round_dir
    markdown = scorecard_markdown(data, link_base="coach/franka/round_000/")   # from another folder
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from robocoach_skills.composition import Composition
from robocoach_world.coach.allocation import Allocation
from robocoach_world.coach.diagnosis import Diagnosis, Pair, route_of
from robocoach_world.records import TrialRecord

CLIP_DIR = "clips"  # under the folder write_clips writes to
SCORECARD_MD, SCORECARD_JSON = "scorecard.md", "scorecard.json"  # the coach writes them next to CLIP_DIR


@dataclass(frozen=True)
class ScorecardConfig:
    strip_frames: int = 8  # frames shown per clip strip, evenly spaced
    clips_per_pair: int = 2  # imagined failure clips shown per pair, the first imagined (0: none)
    top_pairs: int = 3  # pairs shown with clips: those with the most first-timeout mass
    dpi: int = 100  # of the clip PNGs

    def __post_init__(self) -> None:
        if self.strip_frames < 1 or self.top_pairs < 1 or self.dpi < 1 or self.clips_per_pair < 0:
            raise ValueError(
                f"ScorecardConfig needs strip_frames, top_pairs, dpi >= 1 and clips_per_pair >= 0, got {self}"
            )


@dataclass(frozen=True)
class FailureClip:
    """An imagined rollout that first timed out at `pair`, with the judge's view of it."""

    pair: Pair
    composition: str
    seed: int  # initial-state seed
    frames: np.ndarray  # (T, H, W, 3) uint8 imagined frames
    trace: np.ndarray  # (T,) judged progress of the judged-active subtask
    active: np.ndarray | None = None  # (T,) judged-active subtask index; marks subtask switches
    route: tuple[str, ...] = ()  # subtask -> expert version of the trial (diagnosis.route_of)

    @classmethod
    def of_trial(
        cls,
        composition: Composition,
        record: TrialRecord,
        frames: np.ndarray,
        trace: np.ndarray,
        active: np.ndarray | None = None,
    ) -> FailureClip:
        """The clip of a failed imagined trial of `composition`, shown under its first failed pair."""
        if record.success:
            raise ValueError(
                f"trial of {record.composition} seed {record.seed} succeeded: not a failure clip"
            )
        pair = Pair(composition.robot, composition.subtasks[record.first_failed_index])
        route = route_of(composition, record.versions)
        return cls(pair, composition.name, record.seed, frames, trace, active, route)

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


def pick_clips(
    clips: Iterable[FailureClip], config: ScorecardConfig, diagnosis: Diagnosis | None = None
) -> list[FailureClip]:
    """The first `clips_per_pair` clips of each pair, grouped by pair; with a diagnosis only those of
    its `top_pairs` pairs with the most first-timeout mass, highest first: where demos are asked for.

    Without a diagnosis it bounds what a coach holds while it imagines one composition after another.
    """
    clips = list(clips)
    if diagnosis is None:
        pairs = list(dict.fromkeys(c.pair for c in clips))
    else:
        pairs = [p.pair for p in diagnosis.pairs if p.first_failures][: config.top_pairs]
    return [clip for pair in pairs for clip in [c for c in clips if c.pair == pair][: config.clips_per_pair]]


def write_clips(
    clips: Sequence[FailureClip], out_dir: Path, config: ScorecardConfig | None = None
) -> list[dict]:
    """A PNG strip per clip under out_dir/clips; returns the scorecard's JSON-able clip entries
    (pair, composition, seed, route, path relative to out_dir), so the frames can be dropped."""
    entries = []
    for k, clip in enumerate(clips):
        path = f"{CLIP_DIR}/clip_{k:03d}_{clip.pair.robot}_{clip.pair.expert}_{clip.composition}.png"
        write_clip_strip(clip, Path(out_dir) / path, config)
        entries.append(
            {
                "pair": str(clip.pair),
                "composition": clip.composition,
                "seed": clip.seed,
                "route": list(clip.route),
                "path": path,
            }
        )
    return entries


def scorecard(
    diagnosis: Diagnosis, allocation: Allocation | dict | None = None, clips: Sequence[dict] = ()
) -> tuple[str, dict]:
    """(markdown section, JSON-able dict); `clips` are `write_clips` entries, linked relative to their folder.

    `allocation` may be an Allocation or its `to_dict()` form (as the coach state keeps it).
    """
    if isinstance(allocation, Allocation):
        allocation = allocation.to_dict()
    requested = {d["pair"]: d["n_demos"] for d in allocation["demos"]} if allocation else {}
    data = diagnosis.to_dict()
    for p in data["pairs"]:
        p["requested_demos"] = requested.get(p["pair"], 0)
    data["allocation"] = allocation or None
    data["clips"] = list(clips)
    return scorecard_markdown(data), data


def scorecard_markdown(data: dict, link_base: str = "") -> str:
    """The markdown of a scorecard's dict; `link_base` + a clip's path must lead to its PNG from
    where the markdown is read (a report in another folder than the clips' passes that folder)."""
    calibrated_note = [
        "Imagined outcomes calibrated per skill against deployment (the run's imagination "
        "calibration): success when reached shows imagined -> calibrated, and the masses are "
        "calibrated.",
        "",
    ]
    lines = [
        *(calibrated_note if data.get("calibrated") else []),
        "| pair | expert | success when reached | reached | first-timeout mass "
        "| failures concentrate at | demos |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in data["pairs"]:
        rate = "-" if p["success_rate"] is None else f"{p['success_rate']:.0%}"
        if p.get("calibrated_success_rate") is not None:  # set only by a calibrated diagnosis
            rate += f" -> {p['calibrated_success_rate']:.0%}"
        reached = f"{p['reached']}" + ("" if p["eligible"] else " (too few)")
        sites = ", ".join(
            f"{s['composition']} seed {s['seed']} ({s['failures']}x)"
            if s["failures"]
            else f"{s['composition']} seed {s['seed']} (reached, never failed)"
            for s in p["sites"]
        )
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
    if data["allocation"]:
        lines += ["", f"Allocation: {data['allocation']['note']}"]
    if data["clips"]:
        lines += [
            "",
            "Representative imagined failures (frames; judged progress below; dashes: subtask switches):",
        ]
        for c in data["clips"]:
            title = f"{c['pair']} in {c['composition']}, seed {c['seed']}"
            lines += [
                "",
                f"{title}; route: {'; '.join(c['route'])}",
                "",
                f"![{title}]({link_base}{c['path']})",
            ]
    return "\n".join(lines)
