"""Start nodes of the built workspace as real processes and talk to them over DDS.

`running_node` starts an executable from `ros2_ws/install`, waits until the node is discoverable,
and always stops it (SIGINT, then SIGTERM, then SIGKILL to its whole process group), printing its
log when it failed to come up.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import rclpy
from rclpy.node import Node

from robocoach_bringup.processes import (
    node_executable,
    parameter_args,
    start_process,
    stop_process,
    wait_until_up,
)


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


MATCH_GRACE_S = 1.0  # [s] discovery time given to a new action client before its first goal
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


def send_goal(node: Node, client, goal, timeout_s: float = 30.0):
    """Send `goal` through the action `client` and wait until it is accepted.

    Returns the goal handle and the list that collects the goal's feedback messages as they arrive
    (while the caller spins `node`).
    """
    spin_until(node, client.server_is_ready, timeout_s, "action server")
    # "ready" means the server's goal service sees this client; its replies reach the client only once
    # the client's readers are matched too, which can lag on a loaded machine (then the acceptance is
    # lost and the goal looks ignored). Give discovery a moment, as call_service does by reusing clients.
    deadline = time.monotonic() + MATCH_GRACE_S
    with contextlib.suppress(TimeoutError):
        spin_until(node, lambda: time.monotonic() > deadline, 2 * MATCH_GRACE_S, "discovery grace")
    feedback: list = []
    sent = client.send_goal_async(goal, feedback_callback=lambda msg: feedback.append(msg.feedback))
    spin_until(node, sent.done, timeout_s, "goal acceptance")
    assert sent.result().accepted, "the action server rejected the goal"
    return sent.result(), feedback


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
        command += parameter_args(parameters)
    with tempfile.NamedTemporaryFile("w+", prefix=f"{executable}-", suffix=".log") as log:
        process = start_process(command, log)
        try:
            is_up = lambda: node_name in probe.get_node_names()  # noqa: E731
            wait_until_up(process, is_up, executable, Path(log.name), timeout_s)
            yield NodeProcess(process, Path(log.name))
        finally:
            stop_process(process)
