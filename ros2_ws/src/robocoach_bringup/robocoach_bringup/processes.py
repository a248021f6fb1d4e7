"""Run nodes of the built workspace as real processes: what `ros2 run` does, for the CLI and the tests.

`launch` is not installable here, so the main job starts the graph described in `graph.py` with
these functions (the launch files start the same description on a robot workstation). Every process
gets its own session so it can be stopped with its children: SIGINT (rclpy shuts down cleanly),
then SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml
from ament_index_python.packages import get_package_prefix

STOP_GRACE_S = 5.0  # per signal, before escalating to the next one
START_TIMEOUT_S = 60.0  # a node must be discoverable this soon after its process starts


def node_executable(package: str, executable: str) -> Path:
    path = Path(get_package_prefix(package)) / "lib" / package / executable
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: is {executable!r} a console script of {package}?")
    return path


def parameter_args(parameters: dict[str, Any], node_name: str | None = None) -> list[str]:
    """`--ros-args` for a node name and parameters (lists become YAML lists, bools true/false)."""
    args = ["--ros-args"]
    if node_name:
        args += ["-r", f"__node:={node_name}"]
    for key, value in parameters.items():
        args += ["-p", f"{key}:={_yaml_value(value)}"]
    return args


def _yaml_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml_value(v) for v in value) + "]"
    if isinstance(value, str) and (not value or yaml.safe_load(value) != value):
        return json.dumps(value)  # a string YAML would read as something else (JSON, "", "1.0", "true")
    return str(value)


def start_process(command: list[str], log: IO) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RCUTILS_LOGGING_BUFFERED_STREAM": "0"}
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def stop_process(process: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """Stop a process and its children: SIGINT, then SIGTERM, then SIGKILL."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            continue


def wait_until_up(
    process: subprocess.Popen, is_up: Callable[[], bool], what: str, log_path: Path, timeout_s: float
) -> None:
    """Return once `is_up()`; raise RuntimeError with the process log if it died or took too long."""
    deadline = time.monotonic() + timeout_s
    while not is_up():
        if process.poll() is not None or time.monotonic() > deadline:
            state = f"exited with {process.returncode}" if process.poll() is not None else "not discoverable"
            log = Path(log_path).read_text(errors="replace")
            raise RuntimeError(f"{what} {state} after start; its log:\n{log}")
        time.sleep(0.1)


@dataclass
class RunningNode:
    name: str
    process: subprocess.Popen
    log_path: Path
    _log: IO = field(repr=False)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None


@contextmanager
def running_nodes(
    specs: list,  # graph.NodeSpec
    log_dir: Path,
    node_names: Callable[[], list[str]],
    timeout_s: float = START_TIMEOUT_S,
) -> Iterator[dict[str, RunningNode]]:
    """Start every node of `specs` at once, as `ros2 launch` does, and wait until each is discoverable
    (in `node_names()`): the nodes wait for the servers they need, so no start order is required.

    Logs go to `log_dir`/<node>.log; all processes are stopped, in reverse order, when the block ends.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    running: dict[str, RunningNode] = {}
    try:
        for spec in specs:
            log_path = log_dir / f"{spec.name}.log"
            log = open(log_path, "w")  # noqa: SIM115 (closed in the finally below)
            command = [str(node_executable(spec.package, spec.executable))]
            command += parameter_args(spec.parameters, spec.name)
            running[spec.name] = RunningNode(spec.name, start_process(command, log), log_path, log)
        for name, node in running.items():
            wait_until_up(node.process, lambda n=name: n in node_names(), name, node.log_path, timeout_s)
        yield running
    finally:
        for node in reversed(running.values()):
            stop_process(node.process)
            node._log.close()
