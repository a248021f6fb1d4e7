"""`robocoach experiment`: every method of the matched-budget comparison, on the coach's schedule.

    robocoach demo --output runs/demo --until offboard_models      # inputs: bootstrap, world, judge
    robocoach experiment --run runs/demo --output runs/experiment  # full profile
    robocoach experiment --run runs/quick1 --profile reduced --output runs/experiment_reduced

Each (method, arm, seed) run lives in <output>/runs/<method>/<arm>/seed<k>/ (robocoach_world.experiment.
runner): a finished one is read back, an interrupted one resumes through its persisted state. Runs that
start from the same policy share its budget-0 evaluation, in <output>/starts/ (`Method.start_key`). When all
are done, <output>/experiment.json holds every number per seed and <output>/report.md the table and
plots (success vs demo budget, held-out success, Budget AUC with intervals).

The curve is evaluated on few initial states per checkpoint (`--eval-rollouts`); `--final-rollouts N`
evaluates every finished run's first and last checkpoints again on N states per composition (the
curve's and N - eval_rollouts more, `runner.final_evaluation`), and the report adds that comparison
with its own intervals and paired tests: where the runs start and end, on a sample that can separate
methods.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from tqdm import tqdm

from robocoach_skills.constants import ROBOTS
from robocoach_world.calibration import CALIBRATION_FILE
from robocoach_world.coach.allocation import AllocationConfig
from robocoach_world.experiment.methods import get_methods
from robocoach_world.experiment.runner import (
    EXPERIMENT_FILE,
    RunSettings,
    RunSpec,
    final_evaluation,
    run_one,
)
from robocoach_world.experiment.summary import markdown, plot, summarize

log = logging.getLogger("robocoach.experiment")

PROFILES: dict[str, tuple[RunSettings, int]] = {  # settings, seeds
    # The paper's hardware protocol: 150 subtask demos per arm in 3 rounds of 50, every composition.
    "full": (RunSettings(), 3),
    # Small enough for the test suite and a 2-core machine: 2 rounds of 2 demos, 2 training and 1
    # held-out composition served by two experts (press_button, push).
    "reduced": (
        RunSettings(
            budget=4, demos_per_round=2, eval_rollouts=2, training=("press_push", "two_buttons"),
            held_out=("push_then_press",), initial_states=2,
            imagined_rollouts=4, num_world_seeds=2, horizon=40, adapter_steps=20, dense_steps=20,
            min_reach=1, check_trials=2,
            shared_init_steps=20, end_to_end_init_steps=20,
        ),
        1,
    ),
}  # fmt: skip


@dataclass
class ExperimentConfig:
    """Run the matched-budget comparison of coaching methods on the embedded default (MuJoCo)."""

    run: Path = Path("runs/demo")  # a `robocoach demo` run: episodes/, experts/, world/, judge/
    output: Path = Path("runs/experiment")  # per-run directories, experiment.json, report.md, plots
    profile: Literal["full", "reduced"] = "full"  # full: 150 demos in 3 rounds, 3 seeds; reduced: tiny
    methods: tuple[str, ...] = ()  # names from robocoach_world.experiment.methods.METHODS; () = all
    robots: tuple[str, ...] = ROBOTS  # arms; each is coached separately
    seeds: int | None = None  # seeds per (method, arm); None: the profile's
    eval_rollouts: int | None = None  # evaluation initial states per composition; None: the profile's
    allocation: str | None = None  # targeted methods' (b, c, d, g) strategy, e.g. proportional; None: top_m
    # (b, d, g): set aside experts whose demos lifted imagined success by less (AllocationConfig.min_gain);
    # None: never (the paper's rule)
    min_gain: float | None = AllocationConfig.min_gain
    # (b, d): diagnose with the inputs' imagination calibration (<run>/imagination_calibration.json), where
    # they have one; --no-calibrated-targets: raw imagined masses
    calibrated_targets: bool = True
    # Deploy each retrained adapter and its parent this many times before keeping it (coach.acceptance: a
    # worse update is rolled back, its demos carried into the skill's next update); 0: keep every update;
    # None: the profile's
    check_trials: int | None = None
    # Evaluate every run's first and final checkpoints again on this many initial states per composition
    # (the curve's and more), for the final comparison; None: the curve's states only.
    final_rollouts: int | None = None
    workers: int = 1  # runs in parallel processes (each runs one simulator and torch thread)

    def __post_init__(self) -> None:
        unknown = [r for r in self.robots if r not in ROBOTS]
        if unknown:
            raise ValueError(f"unknown robots {unknown}; known robots: {', '.join(ROBOTS)}")
        if self.workers < 1 or (self.seeds is not None and self.seeds < 1):
            raise ValueError(f"workers and seeds must be >= 1, got {self.workers}, {self.seeds}")
        for name in ("episodes", "experts", "world", "judge"):
            if not (self.run / name).exists():
                command = f"robocoach demo --output {self.run} --until offboard_models"
                raise ValueError(f"{self.run} has no {name}/: run `{command}` first")
        settings = self.settings()  # an unknown --allocation fails here, before any run starts
        if self.final_rollouts is not None and self.final_rollouts <= settings.eval_rollouts:
            raise ValueError(
                f"--final-rollouts must exceed the curve's {settings.eval_rollouts} evaluation states, "
                f"got {self.final_rollouts}"
            )

    def settings(self) -> RunSettings:
        settings, _ = PROFILES[self.profile]
        if self.eval_rollouts is not None:
            settings = dataclasses.replace(settings, eval_rollouts=self.eval_rollouts)
        if self.allocation is not None:
            settings = dataclasses.replace(settings, targeted_allocation=self.allocation)
        if self.check_trials is not None:
            settings = dataclasses.replace(settings, check_trials=self.check_trials)
        return dataclasses.replace(
            settings, targeted_min_gain=self.min_gain, calibrated_targets=self.calibrated_targets
        )

    def specs(self) -> list[RunSpec]:
        seeds = self.seeds if self.seeds is not None else PROFILES[self.profile][1]
        return [
            RunSpec(m.name, robot, seed)
            for seed in range(seeds)
            for robot in self.robots
            for m in get_methods(self.methods)
        ]


def run_experiment(config: ExperimentConfig) -> dict:
    """Every run (skipping finished ones), then experiment.json, report.md and the plots."""
    config.output.mkdir(parents=True, exist_ok=True)
    settings, specs = config.settings(), config.specs()
    start = time.perf_counter()
    results = []
    bar = tqdm(total=len(specs), desc="experiment runs", unit="run")
    runs, starts = config.output / "runs", config.output / "starts"  # starts: shared budget-0 evaluations
    if config.workers == 1:
        for spec in specs:
            bar.set_postfix_str(spec.key)
            results.append(_run(config.run, runs / spec.key, spec, settings, starts, config.final_rollouts))
            bar.update()
    else:
        # spawn, not fork: see stages.side_by_side (a forked child of a threaded process can deadlock)
        with ProcessPoolExecutor(
            max_workers=config.workers, mp_context=multiprocessing.get_context("spawn")
        ) as pool:
            futures = [
                pool.submit(_run, config.run, runs / spec.key, spec, settings, starts, config.final_rollouts)
                for spec in specs
            ]
            for future in futures:
                results.append(future.result())
                bar.update()
    bar.close()
    summary = summarize(results)
    files = plot(summary, config.output)
    experiment = {
        "config": {**asdict(config), "run": str(config.run), "output": str(config.output)},
        "settings": asdict(settings),
        "wall_s": time.perf_counter() - start,  # this invocation (finished runs read back count ~0)
        "runs": results,
        "summary": summary,
    }
    (config.output / EXPERIMENT_FILE).write_text(json.dumps(experiment, indent=2))
    (config.output / "report.md").write_text(_report(config, settings, experiment, files))
    return experiment


def _run(
    inputs: Path,
    run_dir: Path,
    spec: RunSpec,
    settings: RunSettings,
    starts: Path,
    final_rollouts: int | None,
) -> dict:
    """One run's result, with its first and last checkpoints on `final_rollouts` states under "final"
    if asked."""
    result = run_one(inputs, run_dir, spec, settings, starts)
    if final_rollouts is not None:
        result["final"] = final_evaluation(inputs, run_dir, spec, settings, final_rollouts, starts)
    return result


def _report(config: ExperimentConfig, settings: RunSettings, experiment: dict, files: list[Path]) -> str:
    runs = experiment["runs"]
    compute = sum(r["seconds"] for r in runs)
    gain = settings.targeted_min_gain
    aside = "" if gain is None else f" (experts whose demos lifted imagined success < {gain:.0%} set aside)"
    calibrated = sorted({f"{r['method']} on {r['robot']}" for r in runs if r.get("calibrated_targets")})
    calibration = (
        f"diagnosed with the inputs' imagination calibration (`{CALIBRATION_FILE}`): {', '.join(calibrated)}"
        if calibrated
        else "no run diagnosed with an imagination calibration"
    )
    return "\n".join(
        [
            f"# RoboCoach matched-budget experiment ({config.profile} profile)",
            "",
            f"Inputs: `{config.run}`; {len(runs)} runs (method x arm x seed); budget {settings.budget} "
            f"subtask demos in rounds of {settings.demos_per_round}; {settings.eval_rollouts} evaluation "
            "initial states per composition (`evaluation_seeds`), the same for every method; "
            f"the targeted methods allocate by `{settings.targeted_allocation}`{aside}; "
            f"run compute {compute:.0f} s, this invocation {experiment['wall_s']:.0f} s; {calibration}.",
            "",
            "Uniform and random acquisition run no rollouts: their coach records are priors, "
            "not imagined trials. (f) records whole-task demos instead of subtask demos (its demos "
            "column counts those): each round it may spend the round's subtask-demo budget times the "
            "mean length of the arm's bootstrap subtask demos, in demo frames. experiment.json holds "
            "every method's demo frames per round (`runs[].rounds[].demo_frames`, and (f)'s "
            "`frame_budget`).",
            "",
            markdown(experiment["summary"], files),
            "",
        ]
    )
