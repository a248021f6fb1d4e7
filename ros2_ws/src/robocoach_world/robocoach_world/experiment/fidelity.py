"""`robocoach fidelity`: imagine every checkpoint of a finished experiment, against its deployed evaluation.

    robocoach experiment --run runs/demo --output runs/experiment
    robocoach fidelity --experiments runs/experiment          # -> runs/experiment/fidelity/
    robocoach fidelity --experiments runs/exp_franka runs/exp_piper --out runs/fidelity   # both arms

An experiment has already deployed every method's policy at every budget checkpoint on the simulator,
from fixed evaluation seeds, with the judge switching subtasks. This imagines the same policies (each
checkpoint's adapter versions) in the experiment's CoachWorld from the same seeds' real initial
observations, judged by the same judge, so the task-policy pairs for issue 5's fidelity measures are
(composition, checkpoint) over every method: many expert versions for the price of imagination alone.

With `--final`, the pairs are where each run started and ended as its final evaluation deployed them
(`robocoach experiment --final-rollouts N`: N states per composition, not the curve's few), so each
pair's deployed success is a rate over N trials rather than a handful.

Modular methods only: their checkpoints are adapter versions in the run's own registry. The
budget-0 checkpoint of an arm's modular runs is one policy (the bootstrap) and counts once. Each
checkpoint's rows are written to <out>/rows/ as they finish, so an interrupted run resumes; what they
were imagined with is in <out>/imagination.json, and another world or setting needs another --out.
Several experiments (one per arm, each with its own inputs: experts, world, judge) pool their pairs
into one set of measures, reported over all arms and per arm; an arm added later to an --out joins
the rows already there.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from robocoach_skills.bootstrap import load_experts
from robocoach_skills.checkpoint import json_bytes, jsonable, replace_file_atomically
from robocoach_skills.device import select_device
from robocoach_world.calibration import CALIBRATION_FILE, ImaginationCalibration
from robocoach_world.experiment.methods import METHODS, PolicyKind
from robocoach_world.experiment.ports import InitialObservations
from robocoach_world.experiment.runner import (
    EXPERIMENT_FILE,
    Checkpoint,
    Deployment,
    RunSettings,
    RunSpec,
)
from robocoach_world.fidelity import (
    calibrated,
    diagnosis_agreement,
    diagnosis_markdown,
    fidelity_markdown,
    fidelity_measures,
    pair_row,
)
from robocoach_world.imagine import ImaginationConfig, imagine_composition
from robocoach_world.world.artifacts import load_world

log = logging.getLogger("robocoach.fidelity")

START = "start"  # the label of an arm's budget-0 checkpoint, shared by its modular runs
WHERE_FINAL = " (the start and each run's last, as the final evaluation deployed them)"


@dataclass
class FidelityConfig:
    """Imagine every modular checkpoint of a finished `robocoach experiment`; compare with deployment."""

    # `robocoach experiment --output` folders; their arms must differ (pairs are named per arm)
    experiments: tuple[Path, ...] = (Path("runs/experiment"),)
    out: Path | None = None  # default (one experiment): <experiment>/fidelity
    rollouts: int = 32  # imagined trials per (composition, checkpoint), over the evaluation seeds
    num_world_seeds: int = ImaginationConfig.num_world_seeds  # world-model noise samples per trial
    agreement: int = ImaginationConfig.agreement  # world seeds that must agree for a trial to count
    horizon: int | None = None  # imagined policy steps per trial; None: the experiment's
    seed: int = 0  # world-model noise
    methods: tuple[str, ...] = ()  # modular methods to include; () = every modular one in the experiment
    # CoachWorld checkpoint to imagine with (every arm); None: each experiment's own. Another world
    # against the same deployed trials is a fair comparison; another judge is not (it switched the
    # deployed subtasks).
    world: Path | None = None
    # pairs from the runs' final evaluations (start and last checkpoint on `--final-rollouts` states)
    # instead of every checkpoint of the curve; the experiments must have been run with that flag
    final: bool = False

    def __post_init__(self) -> None:
        if not self.experiments:
            raise ValueError("name at least one experiment (--experiments)")
        for experiment in self.experiments:
            if not (experiment / EXPERIMENT_FILE).exists():
                raise ValueError(
                    f"{experiment} has no {EXPERIMENT_FILE}: run `robocoach experiment --output "
                    f"{experiment}` to the end first"
                )
        if self.out is None and len(self.experiments) > 1:
            raise ValueError("several experiments pool into one folder: choose it with --out")
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown methods {unknown}; known: {', '.join(METHODS)}")
        if self.rollouts < 1:
            raise ValueError(f"rollouts must be >= 1, got {self.rollouts}")

    @property
    def out_dir(self) -> Path:
        return self.out if self.out is not None else self.experiments[0] / "fidelity"


@dataclass(frozen=True)
class PolicyCheckpoint:
    """One checkpoint to imagine: whose experts, at which adapter versions, deployed how."""

    label: str  # "start", or "<method>/seed<k>@<demos>"
    robot: str
    experts: Path
    checkpoint: Checkpoint

    @property
    def file(self) -> str:
        return self.label.replace("/", "_").replace("@", "_at") + f"_{self.robot}.json"


def checkpoints_to_imagine(
    experiment: dict, root: Path, methods: tuple[str, ...], final: bool = False
) -> list[PolicyCheckpoint]:
    """Every modular run's checkpoints (the shared budget-0 one once per arm), in the experiment's order;
    `final`: each run's start and last checkpoint as its final evaluation deployed them."""
    inputs = Path(experiment["config"]["run"])
    policies, started = [], set()
    for run in experiment["runs"]:
        method = METHODS[run["method"]]
        if method.policy != PolicyKind.MODULAR or (methods and method.name not in methods):
            continue
        run_dir = root / "runs" / RunSpec(run["method"], run["robot"], run["seed"]).key
        for point in (Checkpoint(**c) for c in _deployed(run, root, final)):
            if point.round == 0:
                if run["robot"] in started:
                    continue
                started.add(run["robot"])
                policies.append(PolicyCheckpoint(START, run["robot"], inputs / "experts", point))
            else:
                label = f"{run['method']}/seed{run['seed']}@{point.demos}"
                policies.append(PolicyCheckpoint(label, run["robot"], run_dir / "experts", point))
    return policies


def _deployed(run: dict, root: Path, final: bool) -> list[dict]:
    """The run's deployed checkpoints: its curve, or (`final`) its final evaluation's start and end."""
    if not final:
        return run["checkpoints"]
    if "final" not in run:
        raise ValueError(
            f"{root}: run {run['method']}/{run['robot']}/seed{run['seed']} has no final evaluation: "
            "rerun the experiment with --final-rollouts, or drop --final"
        )
    return [run["final"]["start"], run["final"]["checkpoint"]]


class _Arm:
    """What one arm's checkpoints share: the judge, CoachWorld and the real initial observations."""

    def __init__(
        self, inputs: Path, world: Path, robot: str, settings: RunSettings, seeds: list[int]
    ) -> None:
        self.device = select_device()
        self.deployment = Deployment(inputs, robot, settings, self.device)  # its judge, scene and tasks
        self.world, _ = load_world(world, self.device)
        self.observations = InitialObservations(self.deployment.scene, seeds)
        self.seeds = seeds
        self.compositions = self.deployment.train + self.deployment.held_out

    def imagine(self, policy: PolicyCheckpoint, imagination: ImaginationConfig) -> list[dict]:
        """One row per composition the checkpoint was evaluated on."""
        # the checkpoint's versions, loaded without touching which ones the run has active
        library, _, _, _ = load_experts(policy.experts, policy.checkpoint.versions)
        library.to(self.device)
        detector_args, deadlines = self.deployment.detector_args, self.deployment.deadlines
        rows = []
        for composition in tqdm(self.compositions, desc=policy.label, unit="composition", leave=False):
            images, proprio = self.observations(composition)
            trials = imagine_composition(
                self.world, detector_args["judge"], library, deadlines, composition, images,
                proprio, imagination, versions=policy.checkpoint.versions, initial_seeds=self.seeds,
                verdict=detector_args["verdict"],
            )  # fmt: skip
            deployed = policy.checkpoint.first_failed[composition.name]
            rows.append(
                pair_row(
                    composition, self.seeds, deployed, trials,
                    robot=policy.robot, policy=policy.label, demos=policy.checkpoint.demos,
                )
            )  # fmt: skip
        return rows


def run_fidelity(config: FidelityConfig) -> dict:
    """Imagine the missing checkpoints, then write fidelity.json, fidelity.md and the scatter plots."""
    sources = [_Source.load(path, config) for path in config.experiments]
    arms = [robot for source in sources for robot in source.robots]
    if len(set(arms)) < len(arms):
        raise ValueError(f"the experiments' arms overlap ({', '.join(arms)}): give one experiment per arm")
    policies = [
        p
        for source in sources
        for p in checkpoints_to_imagine(source.experiment, source.path, config.methods, config.final)
    ]
    if not policies:
        chosen = ", ".join(config.methods) or "all"
        raise ValueError(
            f"{', '.join(map(str, config.experiments))}: no modular run to imagine (methods: {chosen})"
        )
    out = config.out_dir
    (out / "rows").mkdir(parents=True, exist_ok=True)
    setups = {robot: source.setup for source in sources for robot in source.robots}
    _claim(out / "imagination.json", setups)
    torch.set_num_threads(1)
    start = time.perf_counter()
    rows, imaginers = [], {}
    for policy in tqdm(policies, desc="fidelity checkpoints", unit="checkpoint"):
        path = out / "rows" / policy.file
        if path.exists():
            rows += json.loads(path.read_text())
            continue
        source = next(s for s in sources if policy.robot in s.robots)
        if policy.robot not in imaginers:
            imaginers[policy.robot] = _Arm(
                source.inputs, source.world, policy.robot, source.settings, source.eval_seeds(policy.robot)
            )
        new = imaginers[policy.robot].imagine(policy, source.imagination)
        replace_file_atomically(path, json_bytes(new))
        log.info("imagined %s on %s: %d compositions", policy.label, policy.robot, len(new))
        rows += new
    for arm in imaginers.values():
        arm.deployment.close()
    calibrations = {robot: s.calibration for s in sources for robot in s.robots if s.calibration}
    rows = calibrated(rows, calibrations)
    measures = fidelity_measures(rows, out, key=_pair_name)
    per_arm = {}
    if len(arms) > 1:
        for robot in arms:
            per_arm[robot] = fidelity_measures(
                [r for r in rows if r["robot"] == robot], out / robot, key=_pair_name
            )
            per_arm[robot]["files"] = [f"{robot}/{f}" for f in per_arm[robot]["files"]]
    result = {
        "config": jsonable(asdict(config)),
        "imagination": setups,
        "checkpoints": len(policies),
        "calibration": {robot: c.to_dict() for robot, c in calibrations.items()},
        "diagnosis": diagnosis_agreement(rows, calibrations),
        "wall_s": time.perf_counter() - start,  # this invocation (checkpoints read back count ~0)
        **measures,
        "per_arm": per_arm,
        "rows": rows,
    }
    replace_file_atomically(out / "fidelity.json", json_bytes(result))
    (out / "fidelity.md").write_text(_report(config, result))
    return result


def _pair_name(row: dict) -> str:
    return f"{row['robot']}:{row['composition']}@{row['policy']}"


@dataclass
class _Source:
    """One finished experiment: its record, the inputs it ran from, and how its arms are imagined."""

    path: Path
    experiment: dict
    inputs: Path  # the experiment's `--run` folder: its experts, judge and CoachWorld
    settings: RunSettings
    imagination: ImaginationConfig
    world: Path
    final: bool  # pairs from the final evaluation (FidelityConfig.final)
    # the inputs' per-skill calibration of imagined outcomes (offboard stage, step 5), where they have one
    calibration: ImaginationCalibration | None

    @classmethod
    def load(cls, path: Path, config: FidelityConfig) -> _Source:
        experiment = json.loads((path / EXPERIMENT_FILE).read_text())
        settings = RunSettings(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in experiment["settings"].items()}
        )
        imagination = ImaginationConfig(
            num_rollouts=config.rollouts,
            num_world_seeds=config.num_world_seeds,
            agreement=config.agreement,
            horizon=config.horizon or settings.horizon,
            seed=config.seed,
        )
        inputs = Path(experiment["config"]["run"])
        world = config.world or inputs / "world"
        file = inputs / CALIBRATION_FILE
        calibration = ImaginationCalibration.load(file) if file.exists() else None
        return cls(path, experiment, inputs, settings, imagination, world, config.final, calibration)

    @property
    def robots(self) -> list[str]:
        return list(dict.fromkeys(run["robot"] for run in self.experiment["runs"]))

    def eval_seeds(self, robot: str) -> list[int]:
        """The arm's deployed initial states, which imagination starts from too."""
        run = next(run for run in self.experiment["runs"] if run["robot"] == robot)
        return run["final"]["eval_seeds"] if self.final else run["eval_seeds"]

    @property
    def setup(self) -> dict:
        """What an arm's rows are imagined with: the record that keeps rows of other setups apart."""
        return {
            "experiment": str(self.path), "world": str(self.world), "judge": str(self.inputs / "judge"),
            **({"deployed": f"final_{self.experiment['config']['final_rollouts']}"} if self.final else {}),
            **asdict(self.imagination),
        }  # fmt: skip


def _claim(path: Path, setups: dict[str, dict]) -> None:
    """Record per arm what the rows in this folder are imagined with; refuse to mix rows of another
    setup. Arms not yet in the folder join it."""
    claimed = json.loads(path.read_text()) if path.exists() else {}
    clash = {robot: setup for robot, setup in setups.items() if claimed.get(robot, setup) != setup}
    if clash:
        raise ValueError(
            f"the rows in {path.parent} were imagined with {json.dumps({r: claimed[r] for r in clash})}, "
            f"not {json.dumps(clash)}: choose a fresh --out"
        )
    replace_file_atomically(path, json_bytes({**claimed, **setups}))


def _report(config: FidelityConfig, result: dict) -> str:
    worlds = ", ".join(f"{robot}: {setup['world']}" for robot, setup in result["imagination"].items())
    lines = [
        f"# Imagined vs deployed: {', '.join(map(str, config.experiments))}",
        "",
        f"{len(result['rows'])} task-policy pairs: {result['checkpoints']} checkpoints of the modular "
        f"methods{WHERE_FINAL if config.final else ''}, each composition deployed from the "
        f"{'final evaluation' if config.final else 'experiment'}'s evaluation seeds and imagined "
        f"{config.rollouts} times from the same initial states ({config.num_world_seeds} world seeds, "
        f"{config.agreement} must agree), in CoachWorld ({worlds}).",
    ]
    if result["calibration"]:
        lines += [
            "",
            f"Calibrated measures: each arm's imagined outcomes corrected per skill by its inputs' "
            f"{CALIBRATION_FILE} ({', '.join(result['calibration'])}), fitted on held-out bootstrap-expert "
            "rollouts and their imagined twins (`robocoach calibrate-imagination`).",
        ]
    lines += fidelity_markdown(result)
    lines += ["", " ".join(f"![{f}]({f})" for f in result["files"])]
    lines += diagnosis_markdown(result["diagnosis"])
    for robot, measures in result["per_arm"].items():
        lines += ["", f"## {robot} only", *fidelity_markdown(measures)]
        lines += ["", " ".join(f"![{f}]({f})" for f in measures["files"])]
    lines += [
        "",
        "## Pairs",
        "",
        "| policy | robot | composition | deployed success | imagined success | calibrated success | "
        "deployed completion | imagined completion | valid imagined |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for r in result["rows"]:
        lines.append(
            f"| {r['policy']} | {r['robot']} | {r['composition']} | {fmt(r['deployed_success'])} | "
            f"{fmt(r['imagined_success'])} | {fmt(r.get('calibrated_success'))} | "
            f"{fmt(r['deployed_completion'])} | {fmt(r['imagined_completion'])} | "
            f"{r['imagined_valid']}/{r['imagined_trials']} |"
        )
    return "\n".join(lines) + "\n"
