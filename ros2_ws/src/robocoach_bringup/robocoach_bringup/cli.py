"""The `robocoach` command line: one command, a subcommand per job, options built from dataclasses.

robocoach demo --quick          # the main job, small profile
robocoach demo --help           # every option with its default
robocoach experiment --profile reduced --run runs/quick1   # the matched-budget comparison
robocoach fidelity --experiments runs/experiment           # imagine its checkpoints: imagined vs deployed
robocoach probe --experts runs/demo/experts --task press_push --subtask 0   # one expert, n fresh demos
robocoach detector-check --experts runs/demo/experts --judge runs/demo/judge   # where detectors switch
robocoach calibrate-imagination --run runs/demo   # per skill: deployed vs imagined, on held-out rollouts
"""

from __future__ import annotations

import logging
import sys

import tyro

from robocoach_bringup.demo import DemoConfig, run_demo
from robocoach_bringup.experiment import ExperimentConfig, run_experiment
from robocoach_bringup.stages.offboard_models import CalibrateConfig, calibrate_command
from robocoach_world.calibration import CALIBRATION_FILE
from robocoach_world.coach import detector_check, probe
from robocoach_world.experiment.fidelity import FidelityConfig, run_fidelity


def _demo(config: DemoConfig) -> int:
    outcomes = run_demo(config)
    missing = [o.name for o in outcomes if o.status == "missing"]
    print(f"report: {config.output / 'report.md'}")
    if missing:
        print(f"stages not built yet (skipped): {', '.join(missing)}")
    return 0


def _experiment(config: ExperimentConfig) -> int:
    run_experiment(config)
    print(f"report: {config.output / 'report.md'}")
    return 0


def _fidelity(config: FidelityConfig) -> int:
    run_fidelity(config)
    print(f"report: {config.out_dir / 'fidelity.md'}")
    return 0


def _probe(config: probe.ProbeConfig) -> int:
    probe.main(config)
    print(f"report: {config.out / 'probe.md'}")
    return 0


def _detector_check(config: detector_check.DetectorCheckConfig) -> int:
    detector_check.main(config)
    print(f"report: {config.out / 'detector_check.md'}")
    return 0


def _calibrate(config: CalibrateConfig) -> int:
    calibration = calibrate_command(config)
    print("\n".join(calibration.describe()))
    print(f"written: {config.run / CALIBRATION_FILE}")
    return 0


COMMANDS = {
    "demo": (DemoConfig, _demo),
    "experiment": (ExperimentConfig, _experiment),
    "fidelity": (FidelityConfig, _fidelity),
    "probe": (probe.ProbeConfig, _probe),
    "detector-check": (detector_check.DetectorCheckConfig, _detector_check),
    "calibrate-imagination": (CalibrateConfig, _calibrate),
}


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    config = tyro.extras.subcommand_cli_from_dict(
        {name: config_type for name, (config_type, _) in COMMANDS.items()},
        args=argv,
        prog="robocoach",
        description="RoboCoach: coach modular robot skill experts with a world model (the RIDI loop).",
    )
    handler = next(run for config_type, run in COMMANDS.values() if isinstance(config, config_type))
    return handler(config)


if __name__ == "__main__":
    sys.exit(main())
