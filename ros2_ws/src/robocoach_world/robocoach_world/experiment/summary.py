"""From per-run results to the comparison: success per budget, Budget AUC, intervals, paired tests.

Units: a run's success at a checkpoint is pooled over its compositions' rollouts (training and
held-out apart). Over seeds: mean and std of those rates, and a Wilson interval over every rollout
pooled. Budget AUC (`measures.budget_auc`) gets a percentile bootstrap interval over evaluation units
(seed, composition, initial state), resampled jointly across checkpoints. Each method is compared with
RoboCoach by an exact McNemar test on final training outcomes paired by (seed, composition, initial
state): both methods started from the very same evaluation states.

Checkpoints sit at budget levels: after round k, k x demos_per_round subtask demos (at most the
budget), or for (f) the demo frames those are worth. Compositions a method has no policy for ((f) on
held-out ones) count as failures, and each row lists them under `unsupported`.

Each row also says where its trials failed first at every checkpoint (training and held-out trials of
every seed; unsupported compositions left out) and what each round's demos showed, summed over seeds:
whether the demos went where the failures are, and whether the failures there then dropped. And how
each failed trial ended (`_ending`): the expert ran out of time on the subtask that failed, or
the judge ended a subtask wrongly (confirmed one the simulator did not see complete, or never confirmed
one that had): the judge's share of the failures, in deployment; and on every deployed trial the
judge's outcome F1 (`_judge_f1`) and first-failure agreement with the simulator (`_judge_agreement`).

Runs evaluated again on more states (`runner.final_evaluation`, `--final-rollouts`) get a `final` block:
start and end success with Wilson intervals (a start shared by seeds counted once), McNemar against
RoboCoach on the end, and per subtask the deployed completions when reached. Runs that timed their
phases get the compute per method and phase.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from robocoach_skills.measures import (
    budget_auc,
    failure_f1,
    mcnemar_exact,
    paired_discordance,
    tally_reached,
    wilson_interval,
)
from robocoach_world.experiment.methods import METHODS, REFERENCE

BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 0


def _outcomes(result: dict, checkpoint: int | str, names: Sequence[str]) -> list[bool]:
    """Outcomes at a checkpoint, or ("start", "checkpoint") at the first or last one on the final
    evaluation's states (`runner.final_evaluation`), ordered by (composition, evaluation seed)."""
    point = result["final"][checkpoint] if isinstance(checkpoint, str) else result["checkpoints"][checkpoint]
    return [o for name in names for o in point["outcomes"][name]]


def _budgets(result: dict) -> list[int]:
    """The budget level of each checkpoint, in subtask demos: what every method was matched at."""
    s = result["settings"]
    return [min(k * s["demos_per_round"], s["budget"]) for k in range(len(result["checkpoints"]))]


def _matrix(runs: Sequence[dict], names_key: str) -> np.ndarray:
    """(units, checkpoints) bool: every (seed, composition, initial state) outcome at every checkpoint."""
    return np.array(
        [[o for r in runs for o in _outcomes(r, k, r[names_key])] for k in range(len(runs[0]["checkpoints"]))]
    ).T


def _first_failures(runs: Sequence[dict], checkpoint: int) -> dict[str, int]:
    """Failed trials at a checkpoint by the subtask they failed first at, over seeds."""
    counts: Counter[str] = Counter()
    for r in runs:
        point = r["checkpoints"][checkpoint]
        for name, firsts in point["first_failed"].items():
            if name not in point.get("unsupported", []):
                counts.update(r["subtasks"][name][i] for i in firsts if i >= 0)
    return dict(counts)


ENDINGS = ("deadline", "judge_early", "judge_missed")  # how a failed trial ended (_ending)


def _deployed_trials(runs: Sequence[dict], checkpoint: int) -> list[tuple[int, int]] | None:
    """(first failed subtask, subtask the router timed out at; -1: none) of every deployed trial at a
    checkpoint, over seeds, compositions a method has no policy for left out; None for runs evaluated
    before the router's timeouts were recorded."""
    trials = []
    for r in runs:
        point = r["checkpoints"][checkpoint]
        if "timed_out" not in point:
            return None
        for name, firsts in point["first_failed"].items():
            if name not in point.get("unsupported", []):
                trials += zip(firsts, point["timed_out"][name], strict=True)
    return trials


def _ending(first: int, timed_out: int) -> str | None:
    """How a deployed trial failed (one of ENDINGS), None if it succeeded.

    deadline: the router timed out at the subtask that failed first (the expert did not finish it);
    judge_early: the judge confirmed that subtask though the simulator did not see it complete;
    judge_missed: the router timed out at an earlier subtask that had completed (never confirmed).
    """
    if first < 0:
        return None
    return "deadline" if timed_out == first else "judge_missed" if 0 <= timed_out < first else "judge_early"


def _failure_endings(trials: Sequence[tuple[int, int]]) -> dict[str, int]:
    """Failed trials by how they ended (`_ending`)."""
    counts = dict.fromkeys(ENDINGS, 0)
    for trial in trials:
        ending = _ending(*trial)
        if ending is not None:
            counts[ending] += 1
    return counts


def _judge_f1(trials: Sequence[tuple[int, int]]) -> float:
    """The judge's outcome F1 (failure positive) on deployed trials: it called a trial failed when a
    subtask reached its deadline, the simulator when a subtask failed. A trial the judge ended at a
    subtask the simulator saw complete (judge_missed) counts as a false failure call: the judge made that
    failure, so counting it as caught would reward every miss. Issue 5's judge measure on deployed video,
    where the expert keeps acting until the judge confirms."""
    return failure_f1(
        [timed_out >= 0 for _, timed_out in trials],
        [_ending(*trial) not in (None, "judge_missed") for trial in trials],
    )


def _judge_agreement(trials: Sequence[tuple[int, int]]) -> float:
    """Share of deployed trials where the judge's verdict (success, or the subtask that reached its
    deadline) is the simulator's (success, or the first subtask that failed): issue 5's first-failure
    agreement on deployed video."""
    return sum(first == timed_out for first, timed_out in trials) / len(trials)


def _round_demos(runs: Sequence[dict], k: int) -> dict[str, int]:
    """Round k's demos by what they showed, over seeds: a subtask, or for (f) a whole composition."""
    counts: Counter[str] = Counter()
    for r in runs:
        for a in r["rounds"][k]["allocation"]:
            # a coach allocation names a Pair ("robot:subtask"); (f)'s a composition
            shown = a["pair"].split(":", 1)[1] if "pair" in a else f"whole task {a['composition']}"
            counts[shown] += a["n_demos"]
    return dict(counts)


def _checks(runs: Sequence[dict]) -> list[int]:
    """[updates checked, of them rolled back] over the runs' rounds (coach.acceptance)."""
    checks = [c for r in runs for h in r["rounds"] for c in h.get("checks", {}).values()]
    return [len(checks), sum(not c["accepted"] for c in checks)]


def _auc_interval(units: np.ndarray) -> tuple[float, float]:
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    rows = rng.integers(0, len(units), (BOOTSTRAP_SAMPLES, len(units)))
    aucs = [budget_auc(units[r].mean(axis=0)) for r in rows]
    low, high = np.percentile(aucs, [2.5, 97.5])
    return float(low), float(high)


def summarize(results: Sequence[dict]) -> dict:
    """Per (method, robot): every figure the report shows, plus the paired tests against RoboCoach."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in sorted(results, key=lambda r: (list(METHODS).index(r["method"]), r["robot"], r["seed"])):
        groups.setdefault((r["method"], r["robot"]), []).append(r)
    table = []
    for (method, robot), runs in groups.items():
        lengths = {len(r["checkpoints"]) for r in runs}
        if len(lengths) != 1:
            raise ValueError(f"{method} on {robot}: seeds have different checkpoint counts {lengths}")
        (n_checkpoints,) = lengths
        train, held = _matrix(runs, "training"), _matrix(runs, "held_out")
        per_seed = [
            [float(np.mean(_outcomes(r, k, r["training"]))) for k in range(n_checkpoints)] for r in runs
        ]
        n = train.shape[0]
        deployed = [_deployed_trials(runs, k) for k in range(n_checkpoints)]
        row = {
            "method": method,
            "letter": METHODS[method].letter,
            "robot": robot,
            "seeds": [r["seed"] for r in runs],
            "budgets": _budgets(runs[0]),
            "demos": [r["demos"] for r in runs],
            "demo_frames": [r["demo_frames"] for r in runs],
            "training_success_per_seed": per_seed,
            "training_success_mean": np.mean(per_seed, axis=0).tolist(),
            "training_success_std": np.std(per_seed, axis=0).tolist(),
            "training_wilson": [wilson_interval(int(s), n) for s in train.sum(axis=0)],
            "held_out_success": held.mean(axis=0).tolist(),
            "held_out_wilson": [wilson_interval(int(s), held.shape[0]) for s in held.sum(axis=0)],
            "budget_auc_per_seed": [budget_auc(s) for s in per_seed],
            "budget_auc": budget_auc(train.mean(axis=0)),
            "budget_auc_interval": _auc_interval(train),
            "eval_units": n,
            "unsupported": sorted(
                {c for r in runs for p in r["checkpoints"] for c in p.get("unsupported", [])}
            ),
            "first_failures": [_first_failures(runs, k) for k in range(n_checkpoints)],
            "round_demos": [_round_demos(runs, k) for k in range(n_checkpoints - 1)],
            # from each checkpoint's deployed trials; None where their timeouts were not recorded
            "failure_endings": [None if t is None else _failure_endings(t) for t in deployed],
            "judge_f1": [None if t is None else _judge_f1(t) for t in deployed],
            "judge_agreement": [None if t is None else _judge_agreement(t) for t in deployed],
            "checks": _checks(runs),
        }
        if all("phase_seconds" in r for r in runs):  # runs finished before phases were timed have none
            row["phase_seconds"] = dict(sum((Counter(r["phase_seconds"]) for r in runs), Counter()))
        if all("final" in r for r in runs):
            row["final"] = _final(runs)
        table.append(row)
    _paired_tests(table, groups)
    return {"table": table}


def _final(runs: Sequence[dict]) -> dict:
    """The first and final checkpoints on every run's `final_evaluation` states: success at the start,
    at the end per seed and pooled, and per subtask."""
    rollouts = {len(r["final"]["eval_seeds"]) for r in runs}
    if len(rollouts) != 1:
        raise ValueError(f"seeds were finally evaluated on different numbers of states: {sorted(rollouts)}")
    per_seed = [float(np.mean(_outcomes(r, "checkpoint", r["training"]))) for r in runs]
    train = [o for r in runs for o in _outcomes(r, "checkpoint", r["training"])]
    held = [o for r in runs for o in _outcomes(r, "checkpoint", r["held_out"])]
    # a start shared by several seeds (Method.start_key) is one evaluation: counted once
    starts = {METHODS[r["method"]].start_key(r["robot"], r["seed"]): r for r in runs}
    start = [o for r in starts.values() for o in _outcomes(r, "start", r["training"])]
    return {
        "eval_rollouts": rollouts.pop(),
        "eval_units": len(train),
        "start_success": float(np.mean(start)),  # training compositions, every distinct start pooled
        "start_wilson": wilson_interval(sum(start), len(start)),
        "training_success_per_seed": per_seed,
        "training_success_mean": float(np.mean(per_seed)),
        "training_success_std": float(np.std(per_seed)),
        "training_wilson": wilson_interval(sum(train), len(train)),
        "held_out_success": float(np.mean(held)),
        "held_out_wilson": wilson_interval(sum(held), len(held)),
        "seconds": sum(r["final"]["seconds"] for r in runs),
        "subtask_start": _completed_when_reached(starts.values(), "start"),
        "subtask_final": _completed_when_reached(runs, "checkpoint"),
    }


def _completed_when_reached(runs: Iterable[dict], key: str) -> dict[str, list[int]]:
    """Per subtask of the training compositions: [completed, reached] over the final evaluation's trials
    at `key` ("start" or "checkpoint"). A trial reaches the subtasks up to the one it failed first at
    and completes those before it: what each method's demos did to each subtask, deployed."""
    counts: dict[str, list[int]] = {}
    for r in runs:
        for name in r["training"]:
            tally_reached(r["final"][key]["first_failed"][name], r["subtasks"][name], counts)
    return counts


def _paired_tests(table: list[dict], groups: dict[tuple[str, str], list[dict]]) -> None:
    """Each row against RoboCoach on the same arm, at the last checkpoint, and (where both rows have
    one) at the final evaluation on more states."""
    for row in table:
        reference = groups.get((REFERENCE, row["robot"]))
        if row["method"] == REFERENCE or reference is None:
            continue
        mine = {r["seed"]: r for r in groups[(row["method"], row["robot"])]}
        row["paired_vs_robocoach"] = _paired(reference, mine, -1)
        if "final" in row and all("final" in r for r in reference):
            row["final"]["paired_vs_robocoach"] = _paired(reference, mine, "checkpoint")


def _paired(reference: Sequence[dict], mine: dict[int, dict], checkpoint: int | str) -> dict[str, dict]:
    """Exact McNemar per split over the (seed, composition, initial state) units both methods ran."""
    tests = {}
    for split in ("training", "held_out"):
        a, b = [], []
        for ref in reference:
            if ref["seed"] in mine:
                a += _outcomes(ref, checkpoint, ref[split])
                b += _outcomes(mine[ref["seed"]], checkpoint, ref[split])
        only_ref, only_other = paired_discordance(a, b)
        tests[split] = {
            "pairs": len(a),
            "only_robocoach": only_ref,
            "only_baseline": only_other,
            "p_value": mcnemar_exact(only_ref, only_other),
        }
    return tests


def plot(summary: dict, out: Path) -> list[Path]:
    """success_vs_budget.png, held_out.png, budget_auc.png in `out`."""
    table = summary["table"]
    robots = sorted({r["robot"] for r in table})
    files = []
    fig = Figure(figsize=(5.5 * len(robots), 4))
    axes = fig.subplots(1, len(robots), squeeze=False)
    for ax, robot in zip(axes[0], robots, strict=True):
        for row in (r for r in table if r["robot"] == robot):
            mean, std = np.array(row["training_success_mean"]), np.array(row["training_success_std"])
            ax.errorbar(
                row["budgets"],
                mean,
                yerr=std,
                marker="o",
                capsize=3,
                label=f"({row['letter']}) {row['method']}",
            )
        ax.set(title=f"{robot}: training compositions", xlabel="subtask demos ((f): their frames)",
               ylabel="deployed success", ylim=(-0.02, 1.02))  # fmt: skip
        ax.legend(fontsize=7)
    files.append(_save(fig, out / "success_vs_budget.png"))
    for name, key, wilson, ylabel in (
        ("held_out.png", "held_out_success", "held_out_wilson", "held-out success (final)"),
        ("budget_auc.png", "budget_auc", "budget_auc_interval", "Budget AUC (training)"),
    ):
        files.append(_bars(table, robots, lambda r, k=key, w=wilson: _last(r[k], r[w]), ylabel, out / name))
    finals = [r for r in table if "final" in r]
    if finals:
        n = finals[0]["final"]["eval_rollouts"]
        files.append(
            _bars(
                finals,
                robots,
                lambda r: (r["final"]["training_success_mean"], r["final"]["training_wilson"]),
                f"training success, final, {n} states/composition",
                out / "final_success.png",
            )
        )
    return files


def _last(value: float | list, interval: tuple | list) -> tuple[float, tuple[float, float]]:
    """A per-checkpoint series' last value and interval, or a scalar's own (Budget AUC)."""
    return (value[-1], interval[-1]) if isinstance(value, list) else (value, interval)


def _bars(
    table: Sequence[dict], robots: Sequence[str], value: Callable[[dict], tuple], ylabel: str, path: Path
) -> Path:
    """One bar per method and a panel per arm; `value(row)` gives (height, (low, high))."""
    fig = Figure(figsize=(5.5 * len(robots), 4))
    axes = fig.subplots(1, len(robots), squeeze=False)
    for ax, robot in zip(axes[0], robots, strict=True):
        rows = [r for r in table if r["robot"] == robot]
        points = [value(r) for r in rows]
        heights = [v for v, _ in points]
        err = np.array([[v - lo, hi - v] for v, (lo, hi) in points]).T.reshape(2, len(points))
        ax.bar(range(len(rows)), heights, yerr=err, capsize=4, color="tab:blue")
        ax.set_xticks(
            range(len(rows)), [f"({r['letter']}) {r['method']}" for r in rows], rotation=30, ha="right"
        )
        ax.set(title=robot, ylabel=ylabel, ylim=(0, 1))
    return _save(fig, path)


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def markdown(summary: dict, files: Sequence[Path]) -> str:
    lines = [
        "| method | arm | seeds | demos | demo frames "
        "| training success per budget (mean ± std; 95% Wilson, pooled) | held-out (final) "
        "| Budget AUC [95% bootstrap] | vs RoboCoach (McNemar, final training) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["table"]:
        budgets = "; ".join(
            f"{b}: {m:.0%} ± {s:.0%} [{lo:.0%}, {hi:.0%}]"
            for b, m, s, (lo, hi) in zip(
                r["budgets"],
                r["training_success_mean"],
                r["training_success_std"],
                r["training_wilson"],
                strict=True,
            )
        )
        lo, hi = r["held_out_wilson"][-1]
        held = f"{r['held_out_success'][-1]:.0%} [{lo:.0%}, {hi:.0%}]" + ("†" if r["unsupported"] else "")
        auc_lo, auc_hi = r["budget_auc_interval"]
        test = r.get("paired_vs_robocoach", {}).get("training")
        versus = (
            f"{test['only_robocoach']} vs {test['only_baseline']} discordant of {test['pairs']}, "
            f"p = {test['p_value']:.3g}"
            if test
            else "-"
        )
        lines.append(
            f"| ({r['letter']}) {r['method']} | {r['robot']} | {len(r['seeds'])} | {_join(r['demos'])} "
            f"| {_join(r['demo_frames'])} "
            f"| {budgets} | {held} | {r['budget_auc']:.3f} [{auc_lo:.3f}, {auc_hi:.3f}] | {versus} |"
        )
    notes = [
        f"† ({r['letter']}) {r['method']} on {r['robot']} has no policy for {', '.join(r['unsupported'])}: "
        "every trial there is counted as failed."
        for r in summary["table"]
        if r["unsupported"]
    ]
    lines += ["", *notes] if notes else []
    lines += _final_table(summary["table"])
    for robot in sorted({r["robot"] for r in summary["table"] if "final" in r}):
        lines += _subtask_table([r for r in summary["table"] if r["robot"] == robot and "final" in r], robot)
    lines += _phase_table(summary["table"])
    lines += ["", " ".join(f"![{Path(f).stem}]({Path(f).name})" for f in files)]
    for robot in sorted({r["robot"] for r in summary["table"]}):
        lines += ["", *_anatomy([r for r in summary["table"] if r["robot"] == robot], robot)]
    return "\n".join(lines)


def _final_table(rows: Sequence[dict]) -> list[str]:
    """The first and last checkpoints again, on the final evaluation's states (rows that have one)."""
    rows = [r for r in rows if "final" in r]
    if not rows:
        return []
    lines = [
        "",
        f"First and final checkpoints on {rows[0]['final']['eval_rollouts']} initial states per "
        "composition (the curve's and more, `--final-rollouts`), the same states for every method:",
        "",
        "| method | arm | training success at budget 0 (pooled) | final training success (mean ± std; "
        "95% Wilson, pooled) | per seed | held-out | vs RoboCoach (McNemar, training) "
        "| vs RoboCoach (McNemar, held-out) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        f = r["final"]
        (lo, hi), (hlo, hhi), (slo, shi) = f["training_wilson"], f["held_out_wilson"], f["start_wilson"]
        tests = f.get("paired_vs_robocoach", {})
        versus = [
            f"{t['only_robocoach']} vs {t['only_baseline']} of {t['pairs']}, p = {t['p_value']:.3g}"
            if t
            else "-"
            for t in (tests.get("training"), tests.get("held_out"))
        ]
        lines.append(
            f"| ({r['letter']}) {r['method']} | {r['robot']} "
            f"| {f['start_success']:.0%} [{slo:.0%}, {shi:.0%}] "
            f"| {f['training_success_mean']:.0%} ± {f['training_success_std']:.0%} [{lo:.0%}, {hi:.0%}] "
            f"| {', '.join(f'{x:.0%}' for x in f['training_success_per_seed'])} "
            f"| {f['held_out_success']:.0%} [{hlo:.0%}, {hhi:.0%}] | {versus[0]} | {versus[1]} |"
        )
    return lines


def _subtask_table(rows: Sequence[dict], robot: str) -> list[str]:
    """One arm's subtasks, deployed: completed / reached at each method's start and end (final states)."""
    reached: Counter[str] = Counter()
    for r in rows:
        reached.update({s: c[1] for s, c in r["final"]["subtask_final"].items()})
    lines = [
        "",
        f"{robot} subtasks on those states, training compositions: completed / reached at budget 0 -> "
        "at the end (a trial reaches the subtasks up to the one it failed first at):",
        "",
        "| subtask | " + " | ".join(f"({r['letter']}) {r['method']}" for r in rows) + " |",
        "|---|" + "---|" * len(rows),
    ]
    for subtask, _ in sorted(reached.items(), key=lambda kv: (-kv[1], kv[0])):
        cells = [
            " -> ".join(
                _rate(r["final"][key].get(subtask, [0, 0])) for key in ("subtask_start", "subtask_final")
            )
            for r in rows
        ]
        lines.append(f"| {subtask} | " + " | ".join(cells) + " |")
    return lines


def _rate(tally: Sequence[int]) -> str:
    done, n = tally
    return f"{done}/{n} ({done / n:.0%})" if n else "0/0"


PHASES = ("imagine", "collect", "improve", "evaluate")  # runner.run_one's phase_seconds, in round order


def _phase_table(rows: Sequence[dict]) -> list[str]:
    """Where each method's compute went, seeds summed (rows whose runs were all timed by phase)."""
    rows = [r for r in rows if "phase_seconds" in r]
    if not rows:
        return []
    lines = [
        "",
        "Compute per method and phase, seconds, seeds summed (imagine: the coach's rollouts, for (g) "
        "deployed ones; collect: scripted demos; improve: adapter updates; evaluate: deployed checkpoints; "
        "a resumed run counts only its last process; improve includes the acceptance checks, whose updates "
        "checked and rolled back are counted last):",
        "",
        "| method | arm | " + " | ".join(PHASES) + " | updates checked / rolled back |",
        "|---|---|" + "---|" * (len(PHASES) + 1),
    ]
    for r in rows:
        cells = [f"{r['phase_seconds'].get(p, 0.0):.0f}" for p in PHASES]
        checked, rolled_back = r.get("checks", [0, 0])
        cells.append(f"{checked} / {rolled_back}" if checked else "-")
        lines.append(f"| ({r['letter']}) {r['method']} | {r['robot']} | " + " | ".join(cells) + " |")
    return lines


def _anatomy(rows: Sequence[dict], robot: str) -> list[str]:
    """One arm's table: per subtask and method, first failures per checkpoint and demos per round."""
    totals: Counter[str] = Counter()
    for r in rows:
        for counts in (*r["first_failures"], *r["round_demos"]):
            totals.update(counts)
    budgets = " / ".join(map(str, rows[0]["budgets"]))
    header = ["subtask"] + [
        f"({r['letter']}) {r['method']}: {title}"
        for r in rows
        for title in (f"first failures at {budgets}", "demos per round")
    ]
    lines = [
        f"Where {robot} trials failed first (every evaluated trial, seeds summed) and what each round's "
        "demos showed:",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for name, _ in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])):
        cells = [name]
        for r in rows:
            cells.append(" / ".join(str(c.get(name, 0)) for c in r["first_failures"]))
            cells.append(" / ".join(str(c.get(name, 0)) for c in r["round_demos"]))
        lines.append("| " + " | ".join(cells) + " |")
    endings = [r for r in rows if None not in r["failure_endings"]]
    if endings:
        lines += [
            "",
            f"How those failed trials ended, at {budgets}: the expert ran out of time on the subtask that "
            "failed / the judge confirmed it though it had not completed / the judge never confirmed an "
            "earlier one that had; and on every trial the judge's outcome F1 (failure positive, a trial "
            "called failed where a subtask reached its deadline, one the judge ended at a completed "
            "subtask called wrongly) and how often its verdict named the subtask the simulator saw fail "
            "first (or success where it succeeded):",
            "",
        ]
        for r in endings:
            parts = [" / ".join(str(e[k]) for e in r["failure_endings"]) for k in ENDINGS]
            f1, agreement = (
                " / ".join(f"{100 * f:.0f}%" for f in r[k]) for k in ("judge_f1", "judge_agreement")
            )
            ended = "; ".join(parts)
            lines.append(f"- ({r['letter']}) {r['method']}: {ended}; F1 {f1}; agreement {agreement}")
    return lines


def _join(values: Sequence[int]) -> str:
    """Per-seed counts, e.g. "4, 4, 4"."""
    return ", ".join(map(str, values))
