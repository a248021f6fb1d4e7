"""Check the completion detectors against the simulator: when would each have switched, and was it done?

A deployed trial fails at a subtask either because the expert did not do it or because the detector
ended it too early or never. A probe (`coach/probe.py`) with `--done-threshold 1.0` separates the
first; this separates the second. It deploys one subtask of a composition from the fixed evaluation
seeds and runs it to its deadline without switching, while every detector watches the same frames:
the expert's done head under the router's rule, and with `--judge` the progress judge under its
calibrated rule. Per trial it records the step each detector would have switched at and the step
the simulator first saw the subtask complete, with the subtask's ground-truth progress at every step;
a detector's switch is then "on time" (the subtask was complete when it fired), "early" (it was not),
or "never" (it did not fire within the deadline).

    python -m robocoach_world.coach.detector_check --experts runs/demo/experts --judge runs/demo/judge \\
        --robot franka --task close_then_push --subtask 0 --out runs/detector_check

Subtasks before the checked one run first and switch by the judge when one is given (as deployed),
else by the done head. Nothing is trained or written besides the report.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import tyro
from matplotlib.figure import Figure

from robocoach_skills.bootstrap import load_experts
from robocoach_skills.checkpoint import json_bytes, jsonable, replace_file_atomically
from robocoach_skills.composition import Subtask
from robocoach_skills.device import select_device
from robocoach_skills.evaluation import GroundTruthMonitor, evaluation_seeds
from robocoach_skills.router import CompletionDetector, DoneHeadDetector, Router, RouterConfig
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.skill_policy import LibraryPolicy
from robocoach_world.coach.probe import probed_composition
from robocoach_world.judge.detector import JudgeDetector, judge_detector_args

log = logging.getLogger(__name__)

ON_TIME, EARLY, NEVER = "on_time", "early", "never"
MARKERS = ("o", "x")  # plot marker of each checked detector, in report["detectors"] order


@dataclass
class DetectorCheckConfig:
    """Run one subtask to its deadline and say where each completion detector would have switched."""

    experts: Path  # expert library folder (backbone + adapters), e.g. <run>/experts
    robot: str = "franka"  # embodiment, from ROBOTS
    task: str = "close_then_push"  # composition whose subtask is checked
    subtask: int = 0  # index of the checked subtask in the composition
    trials: int = 16  # trials from the fixed evaluation seeds
    judge: Path | None = None  # judge folder: check it too, with its calibrated rule and deadlines
    done_threshold: float = RouterConfig.done_threshold  # the done head's rule, as the router applies it
    done_patience: int = RouterConfig.done_patience
    out: Path = Path("runs/detector_check")  # detector_check.json, detector_check.md, detector_check.png
    threads: int = 1  # torch CPU threads

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise ValueError(f"DetectorCheckConfig.trials must be >= 1, got {self.trials}")


class ShadowDetectors(CompletionDetector):
    """Switches by `switching` before subtask `checked`; on it, never switches and logs when each of
    `shadows` would have (the first step its rule held, -1 for never)."""

    def __init__(
        self, switching: CompletionDetector, shadows: dict[str, CompletionDetector], checked: int
    ) -> None:
        self.switching, self.shadows, self.checked = switching, shadows, checked
        self.index, self.step = -1, 0
        self.fired: dict[str, int] = {}

    def start_trial(self) -> None:
        """Call before each trial: the next `reset` is the composition's first subtask."""
        self.index = -1

    def reset(self, subtask: Subtask) -> None:
        self.index += 1
        self.step = 0
        detectors = self.shadows.values() if self.index == self.checked else [self.switching]
        for detector in detectors:
            detector.reset(subtask)
        if self.index == self.checked:
            self.fired = dict.fromkeys(self.shadows, -1)

    def update(self, obs: dict, done_prob: float, action: np.ndarray) -> bool:
        if self.index != self.checked:
            return self.switching.update(obs, done_prob, action)
        for name, detector in self.shadows.items():
            if detector.update(obs, done_prob, action) and self.fired[name] < 0:
                self.fired[name] = self.step
        self.step += 1
        return False


class CompletionTrace(GroundTruthMonitor):
    """Ground truth per step of the checked subtask: whether it is complete, and how far it got (a
    detector that fires early on a drawer opened half way is not one that fires on a closed one)."""

    def __init__(self, scene: SimScene, checked: int) -> None:
        super().__init__(scene)
        self.checked = checked
        self.complete: list[bool] = []
        self.progress_per_step: list[float] = []

    def on_step(self, index: int, obs: dict, done_prob: float) -> None:
        if index == self.checked:
            self.complete.append(self.scene.subtask_success(index))
            self.progress_per_step.append(round(float(self.scene.subtask_progress(index)), 4))


def classify(fired: int, complete: list[bool]) -> str:
    """ON_TIME, EARLY or NEVER for a detector that fired at step `fired` (-1: never) of a subtask whose
    ground truth per step is `complete`.

    >>> classify(3, [False, False, True, True, True]), classify(1, [False, False, True]), classify(-1, [True])
    ('on_time', 'early', 'never')
    """
    if fired < 0:
        return NEVER
    return ON_TIME if complete[fired] else EARLY


def summarize(trials: list[dict], detectors: list[str]) -> dict:
    """Counts of on-time / early / never per detector, with the trials whose subtask ever completed;
    medians of the delay after completion, of the ground-truth progress where a detector fired, and
    of each trial's peak progress.

    >>> t = [{"first_complete": 4, "fired": {"a": 5}, "verdict": {"a": "on_time"},
    ...       "progress": [0.2] * 4 + [1.0] * 2},
    ...      {"first_complete": -1, "fired": {"a": 2}, "verdict": {"a": "early"},
    ...       "progress": [0.1, 0.3, 0.4]}]
    >>> s = summarize(t, ["a"]); s["a"], s["median_peak_progress"]
    ({'on_time': 1, 'early': 1, 'never': 0, 'median_delay': 1.0, 'median_progress_when_fired': 0.7}, 0.7)
    """
    out: dict = {
        "trials": len(trials),
        "completed": sum(t["first_complete"] >= 0 for t in trials),
        "median_peak_progress": _median([max(t["progress"]) for t in trials]),
    }
    for name in detectors:
        verdicts = [t["verdict"][name] for t in trials]
        delays = [t["fired"][name] - t["first_complete"] for t in trials if t["verdict"][name] == ON_TIME]
        when_fired = [t["progress"][t["fired"][name]] for t in trials if t["fired"][name] >= 0]
        out[name] = {v: verdicts.count(v) for v in (ON_TIME, EARLY, NEVER)}
        out[name]["median_delay"] = _median(delays)
        out[name]["median_progress_when_fired"] = _median(when_fired)
    return out


def _median(values: list[float]) -> float | None:
    return round(float(np.median(values)), 4) if values else None


def main(config: DetectorCheckConfig) -> dict:
    torch.set_num_threads(config.threads)
    composition = probed_composition(config.robot, config.task, config.subtask)
    device = select_device()
    library, _, versions, deadlines = load_experts(config.experts)
    library.to(device)
    if config.judge is not None:  # deployed trials run to the judge's deadlines
        judge_args, judge_deadlines = judge_detector_args(config.judge, config.robot, device)
        deadlines = judge_deadlines.per_skill(config.robot, library.skills)
    router_config = RouterConfig(
        done_threshold=config.done_threshold,
        done_patience=config.done_patience,
        skill_deadline_steps=deadlines,
    )
    shadows: dict[str, CompletionDetector] = {"done_head": DoneHeadDetector(router_config)}
    if config.judge is not None:
        shadows["judge"] = JudgeDetector(router_config, **judge_args)
    rule = ShadowDetectors(shadows.get("judge", shadows["done_head"]), shadows, config.subtask)
    router = Router(LibraryPolicy(library, versions), router_config)
    router.detector = rule  # the router builds its detector by name; this one wraps two built ones
    scene = SimScene(SceneConfig(robot=config.robot))
    trials = []
    try:
        for seed in evaluation_seeds(config.trials):
            trace = CompletionTrace(scene, config.subtask)
            rule.start_trial()
            router.run(scene, composition, seed, trace)
            if not trace.complete:  # an earlier subtask timed out: the checked one was never reached
                continue
            first = next((t for t, done in enumerate(trace.complete) if done), -1)
            verdict = {name: classify(fired, trace.complete) for name, fired in rule.fired.items()}
            trials.append(
                {
                    "seed": seed,
                    "steps": len(trace.complete),
                    "first_complete": first,
                    "fired": dict(rule.fired),
                    "verdict": verdict,
                    "progress": trace.progress_per_step,  # ground truth per step of the checked subtask
                }
            )
    finally:
        scene.close()
    skill = composition.subtasks[config.subtask].skill
    report = {
        "config": jsonable(asdict(config)),
        "subtask": str(composition.subtasks[config.subtask]),
        "deadline": router_config.deadline(skill),
        "detectors": list(shadows),
        "summary": summarize(trials, list(shadows)),
        "trials": trials,
    }
    config.out.mkdir(parents=True, exist_ok=True)
    replace_file_atomically(config.out / "detector_check.json", json_bytes(report))
    replace_file_atomically(config.out / "detector_check.md", markdown(report).encode())
    plot(report, config.out / "detector_check.png")
    return report


def markdown(report: dict) -> str:
    c, s = report["config"], report["summary"]
    lines = [
        f"# Detector check: {report['subtask']} in {c['task']} ({c['robot']})",
        "",
        f"Experts from `{c['experts']}`; {s['trials']} of {c['trials']} trials reached the subtask (the "
        f"others timed out before it) and ran to its {report['deadline']}-step deadline without "
        f"switching; the simulator saw it complete in {s['completed']}. Median peak ground-truth "
        f"progress of the subtask: {_show(s['median_peak_progress'], '.2f')}.",
        "",
        "| detector | on time | early | never | median delay after completion [steps] "
        "| median ground-truth progress when it fired |",
        "|---|---|---|---|---|---|",
    ]
    for name in report["detectors"]:
        d = s[name]
        lines.append(
            f"| {name} | {d[ON_TIME]} | {d[EARLY]} | {d[NEVER]} | {_show(d['median_delay'], '.0f')} "
            f"| {_show(d['median_progress_when_fired'], '.2f')} |"
        )
    return "\n".join([*lines, "", "![detector_check.png](detector_check.png)", ""])


def _show(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def plot(report: dict, path: Path) -> Path:
    """Per trial: the step the subtask first completed, and where each detector fired."""
    fig = Figure(figsize=(7.0, 0.8 + 0.25 * max(len(report["trials"]), 4)))
    ax = fig.add_subplot()
    for row, trial in enumerate(report["trials"]):
        if trial["first_complete"] >= 0:
            ax.barh(row, report["deadline"] - trial["first_complete"], left=trial["first_complete"],
                    color="tab:green", alpha=0.25)  # fmt: skip
        for name, marker in zip(report["detectors"], MARKERS[: len(report["detectors"])], strict=True):
            if trial["fired"][name] >= 0:  # labelled once, on the first trial it fired in
                labelled = name in ax.get_legend_handles_labels()[1]
                ax.scatter(
                    trial["fired"][name], row, marker=marker, color="black", label=None if labelled else name
                )
    ax.set_yticks(range(len(report["trials"])), [str(t["seed"]) for t in report["trials"]])
    ax.set(xlabel="policy step (green: subtask complete)", xlim=(0, report["deadline"]),
           title=f"where the detectors switch: {report['subtask']}")  # fmt: skip
    if ax.get_legend_handles_labels()[1]:
        ax.legend(loc="upper left")  # detectors fire late in a subtask: the left stays clear
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    print(markdown(main(tyro.cli(DetectorCheckConfig))))
