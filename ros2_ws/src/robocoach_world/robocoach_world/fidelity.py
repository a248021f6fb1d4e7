"""Imagined vs deployed, per task-policy pair and over all of them (issue 5's fidelity measures).

A pair is one composition run by one policy checkpoint, deployed from a set of initial states and
imagined from the same ones. `pair_row` turns both sides into one row; `fidelity_measures` gives
Spearman, Pearson and MMRV of imagined vs deployed success and subtask completion over the rows (with
a scatter plot each), the first-failure agreement of paired trials, and per skill how often it
completes where reached, deployed and imagined (a world or judge biased on one skill shows there).
`diagnosis_agreement` asks what the coach acts on: per checkpoint, do imagined first failures rank the
(subtask, expert) pairs by first-timeout mass as deployed ones do? The main job's evaluation stage and
`robocoach fidelity` (over a finished experiment) both report through these.

    row = pair_row(composition, seeds, deployed_first_failed, trials, robot="franka", policy="round 1")
    measures = fidelity_measures(rows, out_dir, key=lambda r: f"{r['robot']}:{r['composition']}")
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from robocoach_skills.composition import Composition
from robocoach_skills.measures import first_failure_agreement, spearman, subtask_completion, tally_reached
from robocoach_skills.tasks import get_composition
from robocoach_world.calibration import ImaginationCalibration
from robocoach_world.coach.allocation import AllocationConfig
from robocoach_world.coach.diagnosis import diagnose
from robocoach_world.coach.plots import plot_imagined_vs_deployed
from robocoach_world.imagine import ImaginedTrial
from robocoach_world.records import TrialRecord

# fidelity is measured on each: whole-task success, and the share of subtasks done before the first failure;
# with a calibration (`calibrated`), also on both as calibrated per skill.
# measure -> (label, the row's imagined value, its deployed value)
FIDELITY_MEASURES = {
    "success": ("success", "imagined_success", "deployed_success"),
    "completion": ("subtask completion", "imagined_completion", "deployed_completion"),
    "calibrated_success": ("calibrated success", "calibrated_success", "deployed_success"),
    "calibrated_completion": (
        "calibrated subtask completion",
        "calibrated_completion",
        "deployed_completion",
    ),
}
MIN_PAIRS = 3  # fewer pairs than this carry no rank correlation worth reporting


def pair_row(
    composition: Composition,
    seeds: Sequence[int],
    deployed_first_failed: Sequence[int],
    trials: Sequence[ImaginedTrial],
    **labels,
) -> dict:
    """One task-policy pair: deployed trials (one per seed, first failed subtask, -1 for a success)
    against the imagined trials from the same seeds; `labels` (robot, checkpoint, ...) are kept as given.

    Imagined measures are over valid trials only (world seeds agreed), None where there are none.
    """
    if len(seeds) != len(deployed_first_failed):
        raise ValueError(f"{len(seeds)} seeds but {len(deployed_first_failed)} deployed trials")
    n_subtasks = len(composition.subtasks)
    deployed = [int(f) for f in deployed_first_failed]
    deployed_of_seed = dict(zip(seeds, deployed, strict=True))
    valid = [t.record for t in trials if t.record.valid]
    imagined = [r.first_failed_index for r in valid]
    return {
        **labels,
        "composition": composition.name,
        "held_out": composition.held_out,
        "deployed_success": float(np.mean([f < 0 for f in deployed])),
        "deployed_trials": len(deployed),
        "deployed_first_failed": deployed,
        "deployed_completion": subtask_completion(deployed, n_subtasks),
        "imagined_success": float(np.mean([f < 0 for f in imagined])) if valid else None,
        "imagined_completion": subtask_completion(imagined, n_subtasks) if valid else None,
        "imagined_valid": len(valid),
        "imagined_trials": len(trials),
        "imagined_first_failed": imagined,
        # the deployed first failure from each valid imagined trial's initial state
        "paired_deployed_first_failed": [deployed_of_seed[r.seed] for r in valid],
    }


def fidelity_measures(rows: Sequence[dict], output: Path, key: Callable[[dict], str]) -> dict:
    """{"fidelity": {measure: Spearman, Pearson, MMRV, pairs}, "first_failure_agreement", "files"}.

    A measure is left out where fewer than MIN_PAIRS rows could be judged in imagination; `key` names
    a row's pair in the plots. The plots are written to `output` as imagined_vs_deployed_<measure>.png.
    """
    fidelity, files = {}, []
    for measure, (label, imagined, deployed) in FIDELITY_MEASURES.items():
        pairs = [r for r in rows if r.get(imagined) is not None]
        if len(pairs) < MIN_PAIRS:
            continue
        stats = plot_imagined_vs_deployed(
            {key(r): r[imagined] for r in pairs},
            {key(r): r[deployed] for r in pairs},
            Path(output) / f"imagined_vs_deployed_{measure}.png",
            measure=label,
        )
        files.append(Path(stats.pop("path")).name)
        fidelity[measure] = stats
    deployed = [f for r in rows for f in r["paired_deployed_first_failed"]]
    imagined = [f for r in rows for f in r["imagined_first_failed"]]
    agreement = first_failure_agreement(deployed, imagined) if imagined else None
    return {
        "fidelity": fidelity,
        "first_failure_agreement": agreement,
        "per_skill": per_skill(rows),
        "files": files,
    }


def calibrated(rows: Sequence[dict], calibrations: Mapping[str, ImaginationCalibration]) -> list[dict]:
    """The rows with their imagined trials' calibrated success and completion (None where no trial was
    valid), by their arm's calibration (robot -> calibration; an arm without one is left as it is).
    Computed from each row's imagined first failures, so rows imagined before still calibrate."""
    out = []
    for r in rows:
        calibration = calibrations.get(r["robot"])
        if calibration is None:
            out.append(r)
            continue
        skills = get_composition(r["robot"], r["composition"]).skills
        failed = r["imagined_first_failed"]
        out.append(
            {
                **r,
                "calibrated_success": calibration.success(r["robot"], skills, failed) if failed else None,
                "calibrated_completion": calibration.completion(r["robot"], skills, failed)
                if failed
                else None,
            }
        )
    return out


def diagnosis_agreement(
    rows: Sequence[dict],
    calibrations: Mapping[str, ImaginationCalibration],
    top_m: int = AllocationConfig.top_m,
) -> list[dict]:
    """Per (robot, policy) over its training compositions: the Spearman of imagined first-timeout masses
    (raw, and calibrated where the arm has a calibration) against the masses of the deployed trials,
    and how many of imagination's `top_m` pairs (where demos go) are among deployment's `top_m`.
    A policy whose pairs all weigh the same on one side has a Spearman of None."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        if not r["held_out"]:
            groups[(r["robot"], str(r["policy"]))].append(r)
    out = []
    for (robot, policy), group in groups.items():
        compositions = [get_composition(robot, r["composition"]) for r in group]
        deployed = diagnose(_trial_records(group, compositions, "deployed"), compositions)
        imagined_trials = _trial_records(group, compositions, "imagined")
        truth = {p.pair: p.mass for p in deployed.pairs}
        top = {p.pair for p in deployed.pairs[:top_m]}
        entry = {"robot": robot, "policy": policy, "pairs": len(truth)}
        entry["deployed_top"] = [str(p.pair) for p in deployed.pairs[:top_m]]
        for name, calibration in (("raw", None), ("calibrated", calibrations.get(robot))):
            if name == "calibrated" and calibration is None:
                continue
            imagined = diagnose(imagined_trials, compositions, calibration=calibration)
            masses = {p.pair: p.mass for p in imagined.pairs}
            rho = spearman([masses.get(k, 0.0) for k in truth], list(truth.values()))
            entry[name] = {
                "spearman": None if np.isnan(rho) else rho,
                "top": [str(p.pair) for p in imagined.pairs[:top_m]],
                "top_shared": len(top & {p.pair for p in imagined.pairs[:top_m]}),
            }
        out.append(entry)
    return out


def _trial_records(
    rows: Sequence[dict], compositions: Sequence[Composition], source: str
) -> list[TrialRecord]:
    """The rows' deployed or (valid) imagined trials as the coach's records, for `diagnose`
    (`compositions`: each row's)."""
    return [
        TrialRecord.of_route(composition, {}, f, k, k, source)
        for r, composition in zip(rows, compositions, strict=True)
        for k, f in enumerate(r[f"{source}_first_failed"])
    ]


def per_skill(rows: Sequence[dict]) -> dict[str, dict[str, list[int]]]:
    """ "<robot> <skill>" -> {"deployed": [completed, reached], "imagined": [...]} over the rows' trials
    (imagined: the valid ones). A skill imagined to complete far more (or less) often than it does
    deployed is where the world model or the judge on its frames is wrong, whatever the pairs' ranks say.
    """
    sides: dict[str, dict[str, list[int]]] = {"deployed": {}, "imagined": {}}
    for r in rows:
        skills = [f"{r['robot']} {s}" for s in get_composition(r["robot"], r["composition"]).skills]
        tally_reached(r["deployed_first_failed"], skills, sides["deployed"])
        tally_reached(r["imagined_first_failed"], skills, sides["imagined"])
    return {
        skill: {side: counts.get(skill, [0, 0]) for side, counts in sides.items()}
        for skill in sorted({*sides["deployed"], *sides["imagined"]})
    }


def fidelity_markdown(measures: dict) -> list[str]:
    """The measures as report lines."""
    lines = []
    for measure, stats in measures["fidelity"].items():
        lines += [
            "",
            f"Imagined vs deployed {FIDELITY_MEASURES[measure][0]} over {stats['pairs']} (composition, "
            f"checkpoint) pairs: "
            f"Spearman {stats['spearman']:.3f}, Pearson {stats['pearson']:.3f}, MMRV {stats['mmrv']:.3f}.",
        ]
    if measures["first_failure_agreement"] is not None:
        lines += [
            "",
            f"The first failed subtask of an imagined trial is the deployed trial's from the same initial "
            f"state in {measures['first_failure_agreement']:.0%} of valid imagined trials.",
        ]
    if measures.get("per_skill"):
        rate = lambda c: f"{c[0]}/{c[1]} = {c[0] / c[1]:.0%}" if c[1] else "-"  # noqa: E731
        lines += [
            "",
            "Per skill, subtasks completed where reached:",
            "",
            "| skill | deployed | imagined |",
            "|---|---|---|",
            *(
                f"| {s} | {rate(c['deployed'])} | {rate(c['imagined'])} |"
                for s, c in measures["per_skill"].items()
            ),
        ]
    return lines


def diagnosis_markdown(entries: Sequence[dict]) -> list[str]:
    """`diagnosis_agreement` as report lines: a table per checkpoint and the mean Spearman."""
    if not entries:
        return []
    sides = [s for s in ("raw", "calibrated") if any(s in e for e in entries)]
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    lines = [
        "",
        "Diagnosis vs deployment, per checkpoint over its training compositions: Spearman of the pairs' "
        "first-timeout masses (imagined against deployed trials), and how many of imagination's top "
        "pairs (where demos go) are deployment's:",
        "",
        "| robot | checkpoint | pairs | deployed top | "
        + " | ".join(f"{s} Spearman | {s} top (shared)" for s in sides)
        + " |",
        "|---|---|---|---|" + "---|---|" * len(sides),
    ]
    for e in entries:
        cells = [  # an arm without a calibration has no calibrated side
            f"{fmt(e[s]['spearman'])} | {', '.join(e[s]['top'])} ({e[s]['top_shared']})"
            if s in e
            else "- | -"
            for s in sides
        ]
        lines.append(
            f"| {e['robot']} | {e['policy']} | {e['pairs']} | {', '.join(e['deployed_top'])} | "
            + " | ".join(cells)
            + " |"
        )
    means = []
    for s in sides:
        rhos = [e[s]["spearman"] for e in entries if s in e and e[s]["spearman"] is not None]
        if rhos:
            means.append(f"{s} {np.mean(rhos):.3f} over {len(rhos)} checkpoints")
    lines += ["", f"Mean Spearman of the masses: {'; '.join(means)}."] if means else []
    return lines
