"""Judge quality on labelled video (deployed sim episodes, or imagined rollouts with their labels).

    python -m robocoach_world.judge.evaluate --judge runs/judge --stores runs/corpus_test \
        --calibration runs/corpus_calibration
    ... --world runs/world    # the same episodes as CoachWorld imagines them (`world.evaluate.imagined_twin`)

Deadlines come from `<judge>/deadlines.json`; when it is missing, the done threshold is calibrated
on the episodes of `--calibration` (failed ones penalise false completions) and the deadlines on its
successful episodes, and both are frozen there first. Measures, per group (all, each arm,
demos vs failure-injected rollouts):
  * outcome F1, failure as the positive class (judge says failed vs the simulator says failed);
  * Spearman rho of judged vs ground-truth progress: "online" over the frames where the judge's own
    segmentation agrees with the ground-truth active subtask, "segment" with ground-truth segment
    starts (the scorer alone, no segmentation errors);
  * switch time MAE [s]: detected done time vs the first ground-truth frame with progress 1, over
    subtasks both sides completed (and how many each side missed);
  * first-failed-subtask agreement over episodes both sides call failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from robocoach_skills import measures
from robocoach_skills.composition import Composition
from robocoach_skills.device import select_device
from robocoach_world.judge.checkpoint import DEADLINES_FILE, load_judge
from robocoach_world.judge.data import load_episodes, segments_of
from robocoach_world.judge.model import PROGRESS, ProgressJudge
from robocoach_world.judge.verdict import (
    MIN_DEADLINE_SAMPLES,
    Deadlines,
    Verdict,
    VerdictConfig,
    calibrate_deadlines,
    judge_episode,
    padded_proprio,
)
from robocoach_world.world.evaluate import imagined_twins

log = logging.getLogger("robocoach.judge")

DONE = 1.0  # ground-truth progress of a completed subtask
THRESHOLD_CANDIDATES = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)  # done thresholds calibrate_threshold tries
STEPS_CANDIDATES = (2, 4, 8)  # steps in a row calibrate_steps tries per skill
SWITCH_TOLERANCE_S = 1.0  # a detected switch at most this long after the true one counts as right [s]
# per_skill's counts: ground-truth completions confirmed or missed, the rest called done (false) or not
SKILL_COLUMNS = ("completed", "confirmed", "missed", "not_completed", "false", "rejected")


class LabelledVideo(Protocol):
    """A video with ground truth: an Episode, or an imagined rollout labelled by the simulator."""

    images: np.ndarray  # (T, H, W, 3) uint8
    composition: Composition
    fps: float
    proprio: np.ndarray  # (T, native_dim) joints + gripper: the hand the judge reads
    subtask_index: np.ndarray  # (T,) ground-truth active subtask
    progress: np.ndarray  # (T,) ground-truth progress of the active subtask
    success: bool
    kind: str  # "demo" or "rollout" (used for the per-group rows)


@dataclass
class CaseResult:
    """One video's verdict next to its ground truth."""

    robot: str
    kind: str
    failed: bool  # ground truth
    judged_failed: bool
    first_failed: int  # ground truth, -1 if it succeeded
    judged_first_failed: int
    switches: list[tuple[float, float]]  # (detected, actual) done time [s] per subtask both sides completed
    subtasks: list[tuple[str, bool, bool]]  # per subtask: (skill, completed by ground truth, detected done)
    online: tuple[np.ndarray, np.ndarray]  # (judged, actual) progress where segmentations agree
    segment: tuple[np.ndarray, np.ndarray]  # (judged, actual) progress on ground-truth segments
    frames: int

    @property
    def missed_switches(self) -> int:
        """Subtasks completed by ground truth that the judge never detected done."""
        return sum(true and not judged for _, true, judged in self.subtasks)

    @property
    def false_switches(self) -> int:
        """Subtasks the judge detected done that never completed."""
        return sum(judged and not true for _, true, judged in self.subtasks)


def completion_frames(video: LabelledVideo) -> list[int]:
    """Per subtask: first frame where ground-truth progress reached 1, -1 where it never completed."""
    n = len(video.composition.subtasks)
    out = [-1] * n
    for index in range(n):
        frames = np.flatnonzero((video.subtask_index == index) & (video.progress >= DONE))
        later = np.flatnonzero(video.subtask_index > index)  # moved on: done by the last action at latest
        if len(frames) or len(later):
            out[index] = int(frames[0]) if len(frames) else int(later[0])
    if not video.success:  # a failed video's last subtask never completed, whatever a frame said
        out[int(video.subtask_index[-1])] = -1
    return out


def _switch_tally(
    judge: ProgressJudge,
    videos: Sequence[LabelledVideo],
    truth: Sequence[list[int]],
    config: VerdictConfig,
    tolerance_s: float,
) -> tuple[Counter, Counter]:
    """Per skill, under `config`: (true completions the judge confirmed at their time or up to
    `tolerance_s` after it, true completions plus false ones): what a rule is scored by."""
    hits: Counter = Counter()
    total: Counter = Counter()
    for video, frames in zip(videos, truth, strict=True):
        verdict = judge_episode(judge, video, None, config)
        for subtask, frame, judged, seconds in zip(
            video.composition.subtasks, frames, verdict.completed, verdict.switch_times, strict=True
        ):
            total[subtask.skill] += frame >= 0 or judged
            hits[subtask.skill] += frame >= 0 and judged and 0 <= seconds - frame / video.fps <= tolerance_s
    return hits, total


def _completions(videos: Sequence[LabelledVideo], truth: Sequence[list[int]]) -> Counter:
    """True completions per skill."""
    return Counter(
        subtask.skill
        for video, frames in zip(videos, truth, strict=True)
        for subtask, frame in zip(video.composition.subtasks, frames, strict=True)
        if frame >= 0
    )


def _score(tally: tuple[Counter, Counter], skills: Sequence[str]) -> float:
    hits, total = tally
    return sum(hits[k] for k in skills) / max(sum(total[k] for k in skills), 1)


def calibrate_threshold(
    judge: ProgressJudge,
    videos: Sequence[LabelledVideo],
    base: VerdictConfig,
    candidates: Sequence[float] = THRESHOLD_CANDIDATES,
    tolerance_s: float = SWITCH_TOLERANCE_S,
    min_samples: int = MIN_DEADLINE_SAMPLES,
) -> tuple[VerdictConfig, dict[float, float]]:
    """The done thresholds under which the judge's switches best match the truth on held-out videos.

    Score of a threshold: ground-truth completions the judge detects at their true time or up to
    `tolerance_s` after it, over those completions plus the judge's false completions (subtasks it
    calls done that never completed). An early switch is a miss however close: the router then
    leaves a subtask unfinished, which fails the trial, where a late one only costs time. Only
    failed videos can have false completions; without them a low threshold that catches every
    completion early enough wins, and the same judge then calls failed subtasks done. Ties go to the
    higher threshold. The best over all subtasks is the rule's `threshold`; a skill with at least
    `min_samples` true completions whose own subtasks score best at another candidate (every video
    judged at one threshold at a time) gets that one in `skill_thresholds`. Every threshold is tried
    at `base.consecutive` steps in a row (`calibrate_steps` then sets each skill's).
    Returns (the rule, threshold -> score over all subtasks).
    """
    truth = [completion_frames(video) for video in videos]  # per video and subtask: -1 or its frame
    flat = replace(base, skill_thresholds={}, skill_consecutive={})  # one rule for every skill
    tallies = {
        t: _switch_tally(judge, videos, truth, replace(flat, threshold=t), tolerance_s) for t in candidates
    }

    def best(skills: Sequence[str]) -> tuple[float, dict[float, float]]:
        scores = {t: _score(tallies[t], skills) for t in candidates}
        return max(candidates, key=lambda t: (scores[t], t)), scores

    threshold, scores = best(sorted({s.skill for video in videos for s in video.composition.subtasks}))
    own = {skill: best([skill])[0] for skill, n in _completions(videos, truth).items() if n >= min_samples}
    skill_thresholds = {skill: t for skill, t in sorted(own.items()) if t != threshold}
    return replace(base, threshold=threshold, skill_thresholds=skill_thresholds), scores


def calibrate_steps(
    judge: ProgressJudge,
    videos: Sequence[LabelledVideo],
    rule: VerdictConfig,
    candidates: Sequence[int] = STEPS_CANDIDATES,
    tolerance_s: float = SWITCH_TOLERANCE_S,
    min_samples: int = MIN_DEADLINE_SAMPLES,
) -> tuple[VerdictConfig, dict[str, dict[int, float]]]:
    """Each skill's steps in a row under `rule`'s thresholds, scored as `calibrate_threshold` scores
    thresholds (every video judged with one count for every skill at a time). A skill with at least
    `min_samples` true completions whose subtasks score best at a count other than `rule.consecutive`
    gets it in `skill_consecutive`; ties go to fewer steps (a later switch leaves less of the deadline).
    More steps turn a score that touches the threshold while the subtask is still under way (a press
    before the button latches) into a miss-free wait; they cannot help a skill the judge calls done
    on failed attempts that look finished for longer (session 47's drawer and pushes).
    Returns (the rule, skill -> steps -> score).
    """
    truth = [completion_frames(video) for video in videos]
    counts = sorted({rule.consecutive, *candidates})
    flat = replace(rule, skill_consecutive={})
    tallies = {
        n: _switch_tally(judge, videos, truth, replace(flat, consecutive=n), tolerance_s) for n in counts
    }
    scores = {
        skill: {n: _score(tallies[n], [skill]) for n in counts}
        for skill, completed in sorted(_completions(videos, truth).items())
        if completed >= min_samples
    }
    own = {skill: max(counts, key=lambda n: (by[n], -n)) for skill, by in scores.items()}
    skill_consecutive = {skill: n for skill, n in own.items() if n != rule.consecutive}
    return replace(rule, skill_consecutive=skill_consecutive), scores


def calibrate(
    judge: ProgressJudge,
    videos: Sequence[LabelledVideo],
    base: VerdictConfig,
    quantile: float = 0.9,
    margin: float = 1.5,
    min_samples: int = MIN_DEADLINE_SAMPLES,
    rule_videos: Sequence[LabelledVideo] = (),
    tolerance_s: float = SWITCH_TOLERANCE_S,
) -> Deadlines:
    """The done rule on held-out videos (thresholds, then each skill's steps in a row under them), then
    the deadlines under it on `videos`' truly completed subtasks; freeze the result with
    `.save(<judge>/deadlines.json)`.

    The rule is chosen on `rule_videos` where given (rollouts that hold each completed subtask
    `tolerance_s` before moving on, as deployment does while the judge has not confirmed), else on
    `videos` (successful and, if any, failed) with `tolerance_s` as the late-switch allowance.
    """
    rule_videos = rule_videos or videos
    rule, scores = calibrate_threshold(judge, rule_videos, base, tolerance_s=tolerance_s)
    log.info(
        "done threshold %s, per skill %s (score: switches 0-%s s after the truth over true + false ones: %s)",
        rule.threshold,
        rule.skill_thresholds,
        tolerance_s,
        scores,
    )
    rule, step_scores = calibrate_steps(judge, rule_videos, rule, tolerance_s=tolerance_s)
    log.info(
        "steps in a row %s, per skill %s (scores per skill and count: %s)",
        rule.consecutive,
        rule.skill_consecutive,
        step_scores,
    )
    truth = [[frame >= 0 for frame in completion_frames(v)] for v in videos]
    if not any(done for video in truth for done in video):
        raise ValueError(
            f"deadline calibration needs completed subtasks; none of {len(videos)} videos have any"
        )
    return calibrate_deadlines(judge, videos, quantile, margin, rule, truth, min_samples)


@torch.no_grad()
def segment_scores(judge: ProgressJudge, video: LabelledVideo) -> tuple[np.ndarray, np.ndarray]:
    """(judged, actual) progress over every ground-truth segment, each judged from its true start."""
    device = next(judge.parameters()).device
    proprio = padded_proprio(video)
    judged, actual = [], []
    for seg in segments_of(video, 0):
        frames = torch.as_tensor(video.images[seg.start : seg.end], device=device)[None]
        hand = None if proprio is None else torch.as_tensor(proprio[seg.start : seg.end], device=device)[None]
        logits, _ = judge(frames, judge.condition([seg.robot], [seg.subtask]), proprio=hand)
        judged.append(torch.sigmoid(logits[0, :, PROGRESS]).cpu().numpy())
        actual.append(video.progress[seg.start : seg.end])
    return np.concatenate(judged), np.concatenate(actual)


def score_case(judge: ProgressJudge, video: LabelledVideo, verdict: Verdict) -> CaseResult:
    done_at = completion_frames(video)
    subtasks = [
        (subtask.skill, frame >= 0, judged)
        for subtask, frame, judged in zip(video.composition.subtasks, done_at, verdict.completed, strict=True)
    ]
    switches = [
        (seconds, frame / video.fps)
        for frame, judged, seconds in zip(done_at, verdict.completed, verdict.switch_times, strict=True)
        if frame >= 0 and judged
    ]
    agree = verdict.active == video.subtask_index
    return CaseResult(
        robot=video.composition.robot,
        kind=video.kind,
        failed=not video.success,
        judged_failed=not verdict.success,
        first_failed=-1 if video.success else int(video.subtask_index[-1]),
        judged_first_failed=verdict.first_failed,
        switches=switches,
        subtasks=subtasks,
        online=(verdict.trace[agree], video.progress[agree]),
        segment=segment_scores(judge, video),
        frames=len(video.images),
    )


def summarize(cases: Sequence[CaseResult]) -> dict:
    """The measures over a group of cases (nan where undefined, e.g. no failures in the group)."""
    failed = [c.failed for c in cases]
    judged = [c.judged_failed for c in cases]
    both_failed = [c for c in cases if c.failed and c.judged_failed]
    switches = [s for c in cases for s in c.switches]
    online = [np.concatenate([c.online[k] for c in cases]) for k in (0, 1)]
    segment = [np.concatenate([c.segment[k] for c in cases]) for k in (0, 1)]
    return {
        "episodes": len(cases),
        "failures": int(sum(failed)),
        "failure_f1": measures.failure_f1(judged, failed) if len(cases) >= 2 and any(failed) else math.nan,
        "outcome_accuracy": float(np.mean(np.equal(judged, failed))),
        "first_failed_agreement": (
            float(np.mean([c.first_failed == c.judged_first_failed for c in both_failed]))
            if both_failed
            else math.nan
        ),
        "spearman_online": measures.spearman(*online) if len(online[0]) >= 2 else math.nan,
        "online_frame_share": len(online[0]) / max(1, sum(c.frames for c in cases)),
        "spearman_segment": measures.spearman(*segment),
        "switch_time_mae_s": measures.switch_time_mae(*zip(*switches, strict=True))
        if len(switches) >= 2
        else math.nan,
        "switches_matched": len(switches),
        "switches_missed": int(sum(c.missed_switches for c in cases)),
        "switches_false": int(sum(c.false_switches for c in cases)),
    }


def per_skill(cases: Sequence[CaseResult]) -> dict[str, dict[str, int]]:
    """Skill -> how the judge's done detections met the truth on that skill's subtasks: `completed`
    (by ground truth) of which `confirmed` and `missed`, and `not_completed` of which `false` (called
    done). A skill the judge never confirms fails every composition it is in, whatever the expert does."""
    out: dict[str, dict[str, int]] = {}
    for case in cases:
        for skill, true, judged in case.subtasks:
            row = out.setdefault(skill, dict.fromkeys(SKILL_COLUMNS, 0))
            row["completed" if true else "not_completed"] += 1
            row[("confirmed" if judged else "missed") if true else ("false" if judged else "rejected")] += 1
    return dict(sorted(out.items()))


def evaluate_judge(
    judge: ProgressJudge,
    videos: Sequence[LabelledVideo],
    deadlines: Deadlines,
    config: VerdictConfig | None = None,
) -> dict[str, dict]:
    """Group name -> measures, for groups all / each arm / each kind present in `videos`; the "all"
    group also carries `per_skill`."""
    cases = [score_case(judge, v, judge_episode(judge, v, deadlines, config)) for v in videos]
    groups = {"all": cases}
    for key in ("robot", "kind"):
        for value in sorted({getattr(c, key) for c in cases}):
            groups[value] = [c for c in cases if getattr(c, key) == value]
    results = {name: summarize(group) for name, group in groups.items()}
    results["all"]["per_skill"] = per_skill(cases)
    return results


def format_table(results: dict[str, dict]) -> str:
    columns = [
        ("episodes", "n", "{:d}"),
        ("failures", "fail", "{:d}"),
        ("failure_f1", "F1(fail)", "{:.1%}"),
        ("outcome_accuracy", "acc", "{:.1%}"),
        ("first_failed_agreement", "1st-fail", "{:.1%}"),
        ("spearman_online", "rho online", "{:.3f}"),
        ("spearman_segment", "rho segment", "{:.3f}"),
        ("switch_time_mae_s", "switch MAE s", "{:.2f}"),
        ("switches_missed", "missed", "{:d}"),
        ("switches_false", "false", "{:d}"),
    ]
    header = "| group | " + " | ".join(title for _, title, _ in columns) + " |"
    lines = [header, "|" + "---|" * (len(columns) + 1)]
    for name, row in results.items():
        cells = [
            "nan" if isinstance(row[k], float) and math.isnan(row[k]) else f.format(row[k])
            for k, _, f in columns
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "| skill | " + " | ".join(SKILL_COLUMNS) + " |", "|" + "---|" * (len(SKILL_COLUMNS) + 1)]
    for skill, row in results["all"]["per_skill"].items():
        lines.append(f"| {skill} | " + " | ".join(str(row[k]) for k in SKILL_COLUMNS) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Measure a trained judge on held-out labelled episodes; print a table, write JSON."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--judge", type=Path, default=Path("runs/judge"), help="judge directory (from train)")
    parser.add_argument(
        "--stores", type=Path, nargs="+", required=True, help="held-out episode stores to judge"
    )
    parser.add_argument(
        "--calibration",
        type=Path,
        nargs="*",
        default=[],
        help="stores to calibrate deadlines on, if not frozen yet",
    )
    parser.add_argument("--quantile", type=float, default=0.9, help="deadline calibration quantile")
    parser.add_argument("--margin", type=float, default=1.5, help="deadline = margin x quantile")
    parser.add_argument(
        "--world",
        type=Path,
        default=None,
        help="CoachWorld checkpoint: judge its open-loop replay of each episode's actions, not the video",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON report (default <judge>/evaluation[_imagined].json)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    device = select_device()
    judge, verdict_config, _ = load_judge(args.judge, device)
    deadlines_path = args.judge / DEADLINES_FILE
    if not deadlines_path.exists():
        if not args.calibration:
            parser.error(f"{deadlines_path} does not exist: pass --calibration stores to calibrate it")
        held_out = load_episodes(args.calibration)
        calibrate(judge, held_out, verdict_config, args.quantile, args.margin).save(deadlines_path)
        n_ok = sum(v.success for v in held_out)
        print(
            f"calibrated the done threshold on {len(held_out)} episodes ({len(held_out) - n_ok} failed) "
            f"and the deadlines on the {n_ok} successful ones -> {deadlines_path}"
        )
    deadlines = Deadlines.load(deadlines_path)
    verdict_config = deadlines.verdict_config(verdict_config)
    videos = load_episodes(args.stores)
    if args.world is not None:
        videos = imagined_twins(videos, args.world, device)
    results = evaluate_judge(judge, videos, deadlines, verdict_config)
    print(format_table(results))
    out = args.out or args.judge / ("evaluation.json" if args.world is None else "evaluation_imagined.json")
    report = {
        "stores": [str(s) for s in args.stores],
        "video": "real" if args.world is None else f"imagined by {args.world}",
        "verdict": asdict(verdict_config),
        "deadlines": asdict(deadlines),
        "results": results,
    }
    out.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
