"""Start and stop franka-sim, the libfranka-protocol server, from its own venv (scripts/setup_franka_sim.sh).

libfranka always dials TCP 1337 (arm) and 1338 (hand), so only one server can run on a machine: test
sessions take a file lock around it, and a port held by anything else fails the test with the holder
named instead of silently talking to a stranger's robot.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = ROOT / "scripts" / "setup_franka_sim.sh"
SIM_VENV = Path(os.environ.get("ROBOCOACH_FRANKA_SIM_VENV", ROOT / ".venv" / "franka-sim"))
FR3_MJCF = ROOT / "ros2_ws/src/robocoach_skills/robocoach_skills/robots/assets/fr3.xml"
ARM_PORT, GRIPPER_PORT = 1337, 1338  # fixed by the libfranka protocol
LOCK_PATH = Path("/tmp/robocoach-franka-sim.lock")
LOCK_TIMEOUT = 300.0  # another session's server may hold the ports this long [s]
READY_TIMEOUT = 60.0  # server start-up, MuJoCo compile included [s]
STOP_GRACE = 10.0  # SIGTERM -> SIGKILL [s]
POLL = 0.1  # [s]


@dataclass
class FrankaSim:
    """A running server: where it listens and where it logs."""

    host: str
    log_path: Path
    process: subprocess.Popen

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


@contextmanager
def _machine_lock() -> Iterator[None]:
    with open(LOCK_PATH, "w") as handle:
        deadline = time.monotonic() + LOCK_TIMEOUT
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as busy:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{LOCK_PATH} held over {LOCK_TIMEOUT} s by another test session"
                    ) from busy
                time.sleep(POLL)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _wait_ready(process: subprocess.Popen, log_path: Path) -> None:
    """The server logs its gripper listener last; then a real FCI handshake (franka-sim-check) confirms."""
    deadline = time.monotonic() + READY_TIMEOUT
    while "Gripper server listening" not in log_path.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"franka-sim did not start:\n{log_path.read_text(errors='replace')[-4000:]}")
        time.sleep(POLL)
    subprocess.run(
        [SIM_VENV / "bin" / "franka-sim-check", "--timeout", str(READY_TIMEOUT)],
        check=True,
        capture_output=True,
        timeout=READY_TIMEOUT + 5,
    )


@contextmanager
def franka_sim(log_dir: Path, *args: str) -> Iterator[FrankaSim]:
    """Install (if needed), start, yield and stop franka-sim with the project's FR3 model."""
    subprocess.run(["bash", str(SETUP_SCRIPT)], check=True, capture_output=True)
    with _machine_lock():
        busy = [port for port in (ARM_PORT, GRIPPER_PORT) if not _port_free(port)]
        if busy:
            raise RuntimeError(f"ports {busy} are held by another process (see `ss -ltnp`); stop it first")
        log_path = log_dir / "franka-sim.log"
        with open(log_path, "w") as log:
            process = subprocess.Popen(
                [SIM_VENV / "bin" / "python", "-m", "franka_sim.run_server", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=os.environ | {"FR3_MJCF": str(FR3_MJCF)},
                start_new_session=True,  # signals aimed at pytest never reach it
            )
        try:
            _wait_ready(process, log_path)
            yield FrankaSim("127.0.0.1", log_path, process)
        finally:
            os.killpg(process.pid, signal.SIGTERM)  # not SIGINT: ignored by children of background shells
            try:
                process.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
