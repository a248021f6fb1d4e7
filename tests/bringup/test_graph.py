"""The node graph description that both the launch files and the CLI start."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from robocoach_bringup.graph import (
    MACHINES,
    OFFBOARD_MACHINE,
    ROBOT_MACHINE,
    GraphConfig,
    config_dir,
    describe_graph,
    load_parameter_file,
)
from robocoach_bringup.processes import node_executable, parameter_args
from robocoach_world.calibration import CALIBRATION_FILE, ImaginationCalibration
from robocoach_world.coach.acceptance import AcceptanceConfig
from robocoach_world.coach.allocation import AllocationConfig
from robocoach_world.coach.diagnosis import DiagnosisConfig
from robocoach_world.coach.improve import ImproveConfig
from robocoach_world.coach.loop import CoachConfig
from robocoach_world.coach.scorecard import ScorecardConfig
from robocoach_world.imagine import INITIAL_STATES, ImaginationConfig

# the launch files: the embedded default, each arm on hardware, and the GPU box's side
LAUNCH_FILES = ("sim.launch.py", "franka.launch.py", "agilex.launch.py", "offboard.launch.py")


@pytest.mark.parametrize("backend", ["sim", "hardware"])
def test_every_node_of_the_graph_is_a_built_executable(backend):
    specs = describe_graph(GraphConfig(robot="piper", backend=backend))
    for spec in specs:
        assert node_executable(spec.package, spec.executable).exists()
    names = [s.name for s in specs]
    assert names[-1] == "coach" and len(set(names)) == len(names)
    assert ("sim_robot" in names) == (backend == "sim") and ("robot_driver" in names) != (backend == "sim")
    assert ("scripted_operator" in names) == (backend == "sim") and ("demo_recorder" in names) != (
        backend == "sim"
    )


@pytest.mark.parametrize(
    ("robot", "backend", "option"), [("franka", "franka", "robot_ip"), ("piper", "piper_sdk", "channel")]
)
def test_hardware_graph_drives_the_arm_through_its_backend(robot, backend, option):
    specs = {s.name: s for s in describe_graph(GraphConfig(robot=robot, backend="hardware"))}
    driver = specs["robot_driver"]
    assert driver.machine == ROBOT_MACHINE and driver.executable == "robot_driver"
    assert driver.parameters["robot"] == robot and driver.parameters["backend"] == backend
    assert option in json.loads(driver.parameters["backend_options"])  # from config/<robot>.yaml


def test_parameters_merge_yaml_then_run_paths_then_overrides(tmp_path):
    config = GraphConfig(robot="franka", run_dir=tmp_path, overrides={"skill_executor": {"watchdog_s": 0.2}})
    specs = {s.name: s for s in describe_graph(config)}
    executor = specs["skill_executor"].parameters
    yaml_defaults = load_parameter_file(config_dir() / "robocoach.yaml")["skill_executor"]
    assert executor["policy_rate_hz"] == yaml_defaults["policy_rate_hz"]  # from the YAML
    assert executor["watchdog_s"] == 0.2  # override wins
    assert executor["experts_dir"] == str(tmp_path / "experts") and executor["robot"] == "franka"
    assert specs["world_model"].parameters["experts_dir"] == executor["experts_dir"]  # one place per fact
    assert specs["world_model"].machine == OFFBOARD_MACHINE and specs["sim_robot"].machine == ROBOT_MACHINE


def test_the_coach_diagnoses_with_the_runs_imagination_calibration_once_there_is_one(tmp_path):
    def coach_parameters():
        specs = {s.name: s for s in describe_graph(GraphConfig(robot="franka", run_dir=tmp_path))}
        return specs["coach"].parameters

    assert coach_parameters()["calibration_file"] == ""  # raw imagined masses
    ImaginationCalibration({"franka pick": {"deployed": [1, 4], "imagined": [3, 4]}}).save(
        tmp_path / CALIBRATION_FILE
    )
    assert coach_parameters()["calibration_file"] == str(tmp_path / CALIBRATION_FILE)


def test_the_coach_yaml_states_the_defaults_the_coach_node_takes_from_the_code():
    """config/robocoach.yaml repeats the coach's defaults for the robot workstation's operator to edit;
    the node itself takes them from the dataclasses: the two must not drift apart."""
    coach = load_parameter_file(config_dir() / "robocoach.yaml")["coach"]
    from_code = {
        "budget": CoachConfig.budget,
        "demos_per_round": CoachConfig.demos_per_round,
        "initial_states": INITIAL_STATES,
        "num_rollouts": ImaginationConfig.num_rollouts,
        "horizon": ImaginationConfig.horizon,
        "num_world_seeds": ImaginationConfig.num_world_seeds,
        "min_reach": DiagnosisConfig.min_reach,
        "top_sites": DiagnosisConfig.top_sites,
        "allocation": AllocationConfig.strategy,
        "top_m": AllocationConfig.top_m,
        "allocation_min_gain": AllocationConfig.min_gain,
        "train_steps": ImproveConfig.steps,
        "dense_steps": ImproveConfig.dense_steps,
        "replay_ratio": ImproveConfig.replay_ratio,
        "acceptance_trials": AcceptanceConfig.trials,
        "acceptance_tolerance": AcceptanceConfig.tolerance,
        "clips_per_pair": ScorecardConfig.clips_per_pair,
    }
    assert {name: coach[name] for name in from_code} == from_code


def test_a_subset_of_nodes_and_bad_names_are_handled():
    specs = describe_graph(GraphConfig(robot="piper", nodes=("sim_robot", "skill_executor")))
    assert [s.name for s in specs] == ["sim_robot", "skill_executor"]
    with pytest.raises(ValueError, match="no nodes \\['juggler'\\]"):
        describe_graph(GraphConfig(robot="piper", nodes=("juggler",)))
    with pytest.raises(ValueError, match="unknown robot"):
        GraphConfig(robot="ur5")


@pytest.mark.parametrize("backend", ["sim", "hardware"])
def test_each_machine_starts_its_side_of_the_graph(backend):
    def names(machine: str) -> list[str]:
        return [s.name for s in describe_graph(GraphConfig(robot="franka", backend=backend, machine=machine))]

    assert names(OFFBOARD_MACHINE) == ["world_model", "progress_judge", "coach"]  # offboard.launch.py
    assert sorted(names(ROBOT_MACHINE) + names(OFFBOARD_MACHINE)) == sorted(names("all"))
    assert set(MACHINES) == {"all", ROBOT_MACHINE, OFFBOARD_MACHINE}
    with pytest.raises(ValueError, match="unknown machine"):
        GraphConfig(machine="laptop")


def test_the_installed_share_holds_exactly_the_launch_files():
    """What setup.py's data_files install (the package share when built, else the source tree)."""
    launch_dir = Path(config_dir()).parent / "launch"
    assert sorted(p.name for p in launch_dir.glob("*.launch.py")) == sorted(LAUNCH_FILES)


def test_parameter_args_are_ros_args():
    assert parameter_args({"a": True, "b": [1, 2], "c": "x", "d": '{"k": 1}', "e": ""}, "n") == [
        "--ros-args", "-r", "__node:=n", "-p", "a:=true", "-p", "b:=[1, 2]", "-p", "c:=x",
        "-p", 'd:="{\\"k\\": 1}"', "-p", 'e:=""',
    ]  # fmt: skip


def test_parameter_file_must_be_ros_format(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("node: 3\n")
    with pytest.raises(ValueError, match="not a ROS 2 parameter file"):
        load_parameter_file(bad)


@pytest.mark.skipif(
    importlib.util.find_spec("launch_ros") is None,
    reason="launch/launch_ros are not installable from PyPI here; the launch files run on robot workstations",
)
@pytest.mark.parametrize("launch_file", LAUNCH_FILES)
def test_launch_files_describe_the_graph(launch_file):
    path = Path(config_dir()).parent / "launch" / launch_file
    spec = importlib.util.spec_from_file_location("launch_file", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.generate_launch_description().entities
