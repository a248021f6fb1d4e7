"""The main job on the embedded default: bootstrap -> RIDI rounds -> evaluation -> report.

Each stage is a plain function over (config, results so far). Stages whose code does not exist yet
are listed with the work item that will bring them, and the run says plainly that they were skipped:
the report never pretends a stage ran.

The job takes hours, so it resumes: a finished stage leaves its result in `<output>/stages/`, and a
second run into the same folder with the same settings reads it back instead of redoing the stage.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import markdown

from robocoach_bringup.stages import (
    bootstrap_demos,
    bootstrap_experts,
    evaluation,
    offboard_models,
    ridi_rounds,
)
from robocoach_skills.checkpoint import json_bytes, jsonable, replace_file_atomically
from robocoach_skills.constants import ROBOTS

SETTINGS_FILE = "demo_settings.json"  # what the run in an output folder was started with
STAGES_DIR = "stages"  # one <stage>.json per finished stage: its StageResult
log = logging.getLogger("robocoach.demo")
REPORT_CSS = (  # report.html: readable tables and side-by-side plots, no external assets
    "body{font-family:sans-serif;max-width:60em;margin:auto}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:2px 6px}img{max-width:48%}"
)


@dataclass(frozen=True)
class Profile:
    """The sizes of one run of the main job."""

    demos_per_skill: int  # bootstrap subtask demos per skill and arm
    train_steps: int  # pretraining steps of the bootstrap experts
    perception_frames: int  # rendered frames per arm for the backbone's perception prior
    perception_steps: int  # training steps of that prior
    eval_rollouts: int  # deployed evaluation rollouts per composition and checkpoint
    corpus_per_use: int  # corpus: clean and failure-injected subtask episodes per (composition, subtask)
    corpus_per_composition: int  # corpus: clean and failure-injected whole-task episodes per composition
    rollouts_per_composition: int  # recorded bootstrap-expert rollouts per composition (judge, world)
    # more per composition, held out of training to calibrate the judge's rule; the pick's threshold
    # needs completed expert picks, about 1 in 8 rollouts (20 per composition gave 24 on Franka)
    calibration_rollouts: int
    # [s] a calibration rollout holds each completed subtask this long before switching, as the expert
    # does while a deployed judge has not yet confirmed; the threshold counts confirmations this late
    calibration_hold_s: float
    world_steps: int  # CoachWorld training steps (600 never imagine the drawer opening: docs/world.md)
    judge_epochs: int  # judge training epochs (6 left it a clock on the expert rollouts: docs/bootstrap.md)
    judge_prior: bool  # pretrain the judge's frame encoder on the landmark prior (judge.train --prior)
    judge_on_imagined: bool  # also train the judge on CoachWorld's imagined twins of its episodes (--world)
    demo_budget: int  # coaching demos per arm
    demos_per_round: int  # coaching demos per round
    imagined_rollouts: int  # imagined trials per composition (coach and evaluation)
    initial_states: int  # real initial observations per composition the coach imagines from
    horizon: int  # imagined policy steps per trial
    adapter_steps: int  # adapter update steps per retrained skill
    dense_steps: int  # ... then steps on the vision those left (ImproveConfig.dense_steps)
    eval_compositions: int | None = (
        None  # evaluate the first n training and held-out compositions (None: all)
    )


PROFILES = {
    "default": Profile(
        demos_per_skill=10, train_steps=1500, perception_frames=3000, perception_steps=1500, eval_rollouts=5,
        corpus_per_use=1, corpus_per_composition=1, rollouts_per_composition=2, calibration_rollouts=20,
        calibration_hold_s=5.0, world_steps=3000, judge_epochs=40, judge_prior=True, judge_on_imagined=True,
        demo_budget=150, demos_per_round=50, imagined_rollouts=32, initial_states=8,
        horizon=300, adapter_steps=300, dense_steps=3000,
    ),
    "quick": Profile(
        demos_per_skill=3, train_steps=300, perception_frames=300, perception_steps=200, eval_rollouts=2,
        corpus_per_use=1, corpus_per_composition=0, rollouts_per_composition=1, calibration_rollouts=0,
        calibration_hold_s=5.0, world_steps=60, judge_epochs=1, judge_prior=False, judge_on_imagined=True,
        demo_budget=4, demos_per_round=2, imagined_rollouts=8, initial_states=2,
        horizon=60, adapter_steps=20, dense_steps=20, eval_compositions=2,
    ),
}  # fmt: skip


@dataclass
class DemoConfig:
    """Run the main job on the embedded default (MuJoCo robot) and write a report folder."""

    output: Path = Path("runs/demo")  # report folder: report.md, report.json, plots; a rerun into it resumes
    robots: tuple[str, ...] = ROBOTS  # embodiments to run, from ROBOTS
    quick: bool = False  # the small profile: fewer demos, rollouts and rounds
    image_size: int = 64  # camera image edge [px] for every stage
    seed: int = 0  # seeds every stage
    until: str = ""  # stop after this stage (e.g. offboard_models: the inputs of `robocoach experiment`)

    def __post_init__(self) -> None:
        unknown = [r for r in self.robots if r not in ROBOTS]
        if unknown:
            raise ValueError(f"unknown robots {unknown}; known robots: {', '.join(ROBOTS)}")
        names = [stage.name for stage in STAGES]
        if self.until and self.until not in names:
            raise ValueError(f"unknown stage {self.until!r} for --until; stages: {', '.join(names)}")

    @property
    def profile(self) -> Profile:
        return PROFILES["quick" if self.quick else "default"]

    @property
    def settings(self) -> dict:
        """What a stage's outputs depend on: a run resumes only under the same settings."""
        return {
            "robots": list(self.robots), "quick": self.quick, "image_size": self.image_size, "seed": self.seed
        }  # fmt: skip


StageFn = Callable[[DemoConfig, dict], dict]


@dataclass(frozen=True)
class Stage:
    name: str
    summary: str
    run: StageFn | None = None  # None: not built yet
    missing_until: str = ""  # the work item that brings a missing stage
    # outputs (under the run's folder) an interrupted attempt leaves half-written, removed before the
    # stage runs again; stages that resume their own outputs (recorded stores, coach state) list none
    fresh: tuple[str, ...] = ()


@dataclass
class StageResult:
    name: str
    status: str  # "done", "missing", "failed" or "not run" (after --until)
    seconds: float = 0.0
    results: dict = field(default_factory=dict)
    note: str = ""


STAGES: tuple[Stage, ...] = (
    Stage(
        "bootstrap_demos",
        "scripted operator records a small demo budget per skill on the MuJoCo scene",
        run=bootstrap_demos.run,
        fresh=("episodes",),
    ),
    Stage(
        "bootstrap_experts",
        "train the shared backbone and one adapter per skill on the bootstrap demos; deployed success",
        run=bootstrap_experts.run,
        fresh=("experts",),
    ),
    Stage(
        "offboard_models",
        "corpus with failures, recorded expert rollouts, CoachWorld and progress judge training, deadlines",
        run=offboard_models.run,
    ),
    Stage(
        "ridi_rounds",
        "Route -> Imagine -> Diagnose -> Improve rounds through the ROS graph, one arm after the other",
        run=ridi_rounds.run,
    ),
    Stage(
        "evaluation",
        "deployed and imagined success per composition and budget checkpoint; their agreement",
        run=evaluation.run,
    ),
)


def run_demo(config: DemoConfig, stages: tuple[Stage, ...] = STAGES) -> list[StageResult]:
    """Run every available stage in order, then write the report; a failed stage stops the run.

    Stages an earlier run into the same folder finished are read back, not run again."""
    _claim_output(config, stages)
    results: dict = {}
    outcomes: list[StageResult] = []
    for stage in stages:
        if config.until in [o.name for o in outcomes]:
            outcomes.append(StageResult(stage.name, "not run", note=f"--until {config.until}"))
            continue
        if stage.run is None:
            log.warning(
                "stage %-18s MISSING: %s (comes with: %s)", stage.name, stage.summary, stage.missing_until
            )
            outcomes.append(StageResult(stage.name, "missing", note=stage.missing_until))
            continue
        record = config.output / STAGES_DIR / f"{stage.name}.json"
        if record.exists():
            earlier = _read_record(record)
            note = "; ".join(filter(None, ["read back: finished in an earlier run", earlier.note]))
            outcomes.append(replace(earlier, note=note))
            results[stage.name] = earlier.results
            log.info("stage %-18s finished in an earlier run (%s), read back", stage.name, record)
            continue
        log.info("stage %-18s running: %s", stage.name, stage.summary)
        for name in stage.fresh:  # what an interrupted attempt left
            shutil.rmtree(config.output / name, ignore_errors=True)
        start = time.perf_counter()
        try:
            results[stage.name] = stage.run(config, results)
        except Exception as error:
            outcomes.append(StageResult(stage.name, "failed", time.perf_counter() - start, note=repr(error)))
            write_report(config, outcomes)
            raise
        outcomes.append(StageResult(stage.name, "done", time.perf_counter() - start, results[stage.name]))
        replace_file_atomically(record, json_bytes(jsonable(asdict(outcomes[-1]))))
        log.info("stage %-18s done in %.1f s", stage.name, outcomes[-1].seconds)
    write_report(config, outcomes)
    return outcomes


def _read_record(path: Path) -> StageResult:
    try:
        return StageResult(**json.loads(path.read_text()))
    except (json.JSONDecodeError, TypeError) as error:
        raise ValueError(f"{path}: not a stage record ({error}); delete it to run the stage again") from error


def _claim_output(config: DemoConfig, stages: tuple[Stage, ...]) -> None:
    """Make config.output this run's folder: new, or holding a run with the same settings (resumed).

    A folder with another run's settings, or with outputs but no settings (written before runs
    resumed), is refused rather than mixed into: its stages would not match this run's."""
    config.output.mkdir(parents=True, exist_ok=True)
    path = config.output / SETTINGS_FILE
    if path.exists():
        try:
            earlier = json.loads(path.read_text())
        except json.JSONDecodeError as error:  # only ever written atomically: broken by hand
            raise ValueError(
                f"{path}: not a settings file ({error}); pass another --output, or delete that folder "
                "to start over"
            ) from error
        if earlier != config.settings:
            raise ValueError(
                f"{config.output} holds a run with settings {earlier}, not {config.settings}: "
                "pass another --output, or delete that folder to start over"
            )
        return
    if any((config.output / name).exists() for stage in stages for name in stage.fresh):
        raise ValueError(
            f"{config.output} holds outputs of a run without {SETTINGS_FILE} (an older version that did "
            "not resume): pass another --output, or delete that folder to start over"
        )
    replace_file_atomically(path, json_bytes(config.settings))


def write_report(config: DemoConfig, outcomes: list[StageResult]) -> Path:
    """report.json (every figure) and report.md (the same, for a person), in config.output."""
    report = {
        "config": {**asdict(config), "output": str(config.output)},
        "stages": [asdict(o) for o in outcomes],
        "missing_stages": [o.name for o in outcomes if o.status == "missing"],
    }
    (config.output / "report.json").write_text(json.dumps(report, indent=2, default=str))
    lines = [
        "# RoboCoach demo report",
        "",
        f"Robots: {', '.join(config.robots)}; quick: {config.quick}; seed: {config.seed}",
        "",
        "| stage | status | time [s] | note |",
        "|---|---|---|---|",
    ]
    lines += [f"| {o.name} | {o.status} | {o.seconds:.1f} | {o.note} |" for o in outcomes]
    missing = report["missing_stages"]
    if missing:
        lines += ["", f"**Not run because not built yet:** {', '.join(missing)}. The main job is incomplete."]
    for outcome in outcomes:
        if outcome.status == "done" and outcome.results.get("markdown"):
            lines += ["", f"## {outcome.name}", "", outcome.results["markdown"]]
    path = config.output / "report.md"
    path.write_text("\n".join(lines) + "\n")
    html = markdown.markdown(path.read_text(), extensions=["tables"])
    (config.output / "report.html").write_text(
        f"<!doctype html><meta charset='utf-8'><title>RoboCoach demo report</title>"
        f"<style>{REPORT_CSS}</style><body>{html}</body>\n"
    )
    return path
