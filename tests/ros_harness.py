"""Start nodes of the built workspace as real processes and talk to them over DDS.

`running_node` starts an executable from `ros2_ws/install`, waits until the node is discoverable,
and always stops it (SIGINT, then SIGTERM, then SIGKILL to its whole process group), printing its
log when it failed to come up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import rclpy
from ament_index_python.packages import get_package_prefix
from rclpy.node import Node

STOP_GRACE_S = 5.0


def node_executable(package: str, executable: str) -> Path:
    path = Path(get_package_prefix(package)) / "lib" / package / executable
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: is {executable!r} a console script of {package}?")
    return path


@contextmanager
def probe_node(name: str = "test_probe") -> Iterator[Node]:
    context = rclpy.context.Context()
    rclpy.init(context=context)
    node = rclpy.create_node(name, context=context)
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=context)


def spin_until(node: Node, done: Callable[[], bool], timeout_s: float, what: str = "condition") -> None:
    """Spin `node` until `done()` is true; fail with `what` after `timeout_s`."""
    executor = rclpy.executors.SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    try:
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout_s:.1f} s waiting for {what}")
            executor.spin_once(timeout_sec=0.02)
    finally:
        executor.remove_node(node)


_CLIENTS: dict[tuple[int, str], object] = {}


def call_service(node: Node, srv_type, name: str, request, timeout_s: float = 30.0):
    """Call a service and wait for its response, reusing one client per (node, service).

    A client created right before its call can lose the response: the server may see the request
    before it has matched the new client's response reader. Reused clients are matched once.
    """
    key = (id(node), name)
    if key not in _CLIENTS:
        _CLIENTS[key] = node.create_client(srv_type, name)
    client = _CLIENTS[key]
    spin_until(node, client.service_is_ready, timeout_s, f"{name} service")
    future = client.call_async(request)
    spin_until(node, future.done, timeout_s, f"{name} response")
    return future.result()


def _parameter_args(parameters: dict) -> list[str]:
    args = ["--ros-args"]
    for key, value in parameters.items():
        args += ["-p", f"{key}:={str(value).lower() if isinstance(value, bool) else value}"]
    return args


def _stop(process: subprocess.Popen) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
            return
        os.killpg(process.pid, sig)
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            continue


@dataclass
class NodeProcess:
    """A node under test: its process and everything it has printed so far."""

    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def running_node(
    probe: Node,
    package: str,
    executable: str,
    node_name: str,
    parameters: dict | None = None,
    extra_args: list[str] | None = None,
    timeout_s: float = 30.0,
) -> Iterator[NodeProcess]:
    """Run `executable` of `package` until the with-block ends; yield once `node_name` is discoverable."""
    command = [str(node_executable(package, executable)), *(extra_args or [])]
    if parameters:
        command += _parameter_args(parameters)
    with tempfile.NamedTemporaryFile("w+", prefix=f"{executable}-", suffix=".log") as log:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "RCUTILS_LOGGING_BUFFERED_STREAM": "0"}
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            deadline = time.monotonic() + timeout_s
            while node_name not in probe.get_node_names():
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    state = (
                        f"exited with {process.returncode}"
                        if process.poll() is not None
                        else "not discoverable"
                    )
                    raise RuntimeError(f"{executable} {state} after start; its log:\n{log.read()}")
                time.sleep(0.1)
            yield NodeProcess(process, Path(log.name))
        finally:
            _stop(process)
