"""The RoboCoach node graph as data: which nodes run, on which machine, with which parameters.

One description, two starters: the launch files (`launch/*.launch.py`, robot workstations) and the
`robocoach` CLI / tests (`processes.running_nodes`, here) both turn `describe_graph` into processes,
so nothing the launch files start goes untested. Parameters come from `config/robocoach.yaml` (every
node) and `config/<robot>.yaml` (per-arm overrides) in the ROS 2 parameter-file format, then from the
run directory's paths, then from explicit overrides.

    specs = describe_graph(GraphConfig(robot="piper", backend="sim", run_dir=Path("runs/demo")))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from robocoach_skills.constants import ROBOTS
from robocoach_world.calibration import CALIBRATION_FILE

CONFIG_DIR = Path(__file__).resolve().parent.parent / "config"  # in the source tree
BACKENDS = ("sim", "hardware")  # hardware: the arm's driver publishes the robot topics, no sim node
ROBOT_MACHINE, OFFBOARD_MACHINE = "robot", "offboard"  # robot workstation vs the GPU box
MACHINES = ("all", ROBOT_MACHINE, OFFBOARD_MACHINE)  # whose nodes a starter starts ("all": one machine)
# Robot backend (robots.make_robot) of the `robot_driver` per arm on hardware; options in config/<robot>.yaml.
HARDWARE_BACKENDS = {"franka": "franka", "piper": "piper_sdk"}


def config_dir() -> Path:
    """The parameter files: the package share directory when installed, else the source tree."""
    try:
        from ament_index_python.packages import get_package_share_directory

        installed = Path(get_package_share_directory("robocoach_bringup")) / "config"
        if installed.is_dir():
            return installed
    except (ImportError, LookupError):
        pass
    return CONFIG_DIR


@dataclass(frozen=True)
class RunPaths:
    """Where a run keeps its files; every node that reads or writes one gets it as a parameter."""

    root: Path

    @property
    def experts(self) -> Path:
        return self.root / "experts"

    @property
    def episodes(self) -> Path:
        return self.root / "episodes"

    @property
    def world(self) -> Path:
        return self.root / "world"

    @property
    def judge(self) -> Path:
        return self.root / "judge"

    @property
    def coach(self) -> Path:
        return self.root / "coach"

    @property
    def calibration(self) -> Path:
        """Imagination calibration (offboard stage, step 5); the coach diagnoses with it when present."""
        return self.root / CALIBRATION_FILE


@dataclass(frozen=True)
class NodeSpec:
    package: str
    executable: str
    name: str
    machine: str  # ROBOT_MACHINE or OFFBOARD_MACHINE
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass
class GraphConfig:
    robot: str = "franka"  # embodiment, from ROBOTS
    backend: str = "sim"  # from BACKENDS
    run_dir: Path = Path("runs/demo")  # experts, episodes, world, judge and coach state live here
    experts_dir: Path | None = None  # the experts the graph runs and coaches (None: <run_dir>/experts)
    nodes: tuple[str, ...] = ()  # only these node names ("" = the whole graph)
    machine: str = "all"  # from MACHINES: only the nodes that run on this machine
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)  # node name -> parameters

    def __post_init__(self) -> None:
        if self.robot not in ROBOTS:
            raise ValueError(f"unknown robot {self.robot!r}; known robots: {', '.join(ROBOTS)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; known backends: {', '.join(BACKENDS)}")
        if self.machine not in MACHINES:
            raise ValueError(f"unknown machine {self.machine!r}; known machines: {', '.join(MACHINES)}")


def _nodes(config: GraphConfig, paths: RunPaths) -> list[NodeSpec]:
    """The graph in start order: robot side first (the others wait for its topics), coach last."""
    robot = {"robot": config.robot}
    experts = {"experts_dir": str(config.experts_dir or paths.experts)}
    specs = []
    if config.backend == "sim":
        specs.append(NodeSpec("robocoach_skills", "sim_robot", "sim_robot", ROBOT_MACHINE, robot))
    else:
        driver = {**robot, "backend": HARDWARE_BACKENDS[config.robot]}
        specs.append(NodeSpec("robocoach_skills", "robot_driver", "robot_driver", ROBOT_MACHINE, driver))
    specs += [
        NodeSpec(
            "robocoach_skills",
            "skill_executor",
            "skill_executor",
            ROBOT_MACHINE,
            {**robot, **experts, "judge_dir": str(paths.judge)},
        ),
        NodeSpec("robocoach_skills", "task_markers", "task_markers", ROBOT_MACHINE),
        NodeSpec(
            "robocoach_world",
            "world_model",
            "world_model",
            OFFBOARD_MACHINE,
            {"world_dir": str(paths.world), "judge_dir": str(paths.judge), **experts},
        ),
        NodeSpec(
            "robocoach_world",
            "progress_judge",
            "progress_judge",
            OFFBOARD_MACHINE,
            {"judge_dir": str(paths.judge)},
        ),
    ]
    if config.backend == "sim":  # on hardware a person answers at the demo_recorder station
        specs.append(
            NodeSpec(
                "robocoach_skills",
                "scripted_operator",
                "scripted_operator",
                ROBOT_MACHINE,
                {**robot, "store": str(paths.episodes)},
            )
        )
    else:
        specs.append(
            NodeSpec(
                "robocoach_skills",
                "demo_recorder",
                "demo_recorder",
                ROBOT_MACHINE,
                {**robot, "backend": "driver", "store_dir": str(paths.episodes)},  # the arm is the driver's
            )
        )
    specs.append(
        NodeSpec(
            "robocoach_world",
            "coach",
            "coach",
            OFFBOARD_MACHINE,
            {
                **robot,
                **experts,
                "store": str(paths.episodes),
                "state_dir": str(paths.coach),
                "calibration_file": str(paths.calibration) if paths.calibration.exists() else "",
                "reset_scene": config.backend == "sim",  # on hardware the scene is set up by the operator
            },
        )
    )
    return specs


def load_parameter_file(path: Path) -> dict[str, dict[str, Any]]:
    """node name -> parameters, from a ROS 2 parameter file (`<node>: {ros__parameters: {...}}`)."""
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    try:
        return {node: dict(section.get("ros__parameters", {})) for node, section in data.items()}
    except AttributeError as error:
        raise ValueError(f"{path} is not a ROS 2 parameter file (node: ros__parameters: ...)") from error


def describe_graph(config: GraphConfig) -> list[NodeSpec]:
    """Every node with merged parameters: YAML defaults < per-robot YAML < run paths < overrides."""
    directory = config_dir()
    common = load_parameter_file(directory / "robocoach.yaml")
    per_robot = load_parameter_file(directory / f"{config.robot}.yaml")
    graph = _nodes(config, RunPaths(config.run_dir))
    unknown = set(config.nodes) - {s.name for s in graph}
    if unknown:
        raise ValueError(f"graph has no nodes {sorted(unknown)}; it has {[s.name for s in graph]}")
    specs = []
    for spec in graph:
        if (config.nodes and spec.name not in config.nodes) or config.machine not in ("all", spec.machine):
            continue
        parameters = {
            **common.get(spec.name, {}),
            **per_robot.get(spec.name, {}),
            **spec.parameters,
            **config.overrides.get(spec.name, {}),
        }
        specs.append(NodeSpec(spec.package, spec.executable, spec.name, spec.machine, parameters))
    return specs
