"""Test-session setup shared by every test: a private DDS domain and the ROS test harness fixtures."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

DOMAIN_LOCK_DIR = Path("/tmp")
DOMAIN_IDS = range(1, 101)  # ids whose Fast DDS ports are valid on every host


def _claim_domain_id() -> tuple[int, object]:
    """Lock one ROS_DOMAIN_ID for this session, so parallel test runs never hear each other."""
    start = os.getpid() % len(DOMAIN_IDS)
    for offset in range(len(DOMAIN_IDS)):
        domain = DOMAIN_IDS[(start + offset) % len(DOMAIN_IDS)]
        handle = open(DOMAIN_LOCK_DIR / f"robocoach-test-domain-{domain}.lock", "w")  # noqa: SIM115 (held all session)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return domain, handle
    raise RuntimeError(f"every ROS_DOMAIN_ID in {DOMAIN_IDS} is held by another test session")


# Set before anything initialises rclpy, and inherited by every node the tests start.
_DOMAIN_ID, _DOMAIN_LOCK = _claim_domain_id()
os.environ["ROS_DOMAIN_ID"] = str(_DOMAIN_ID)
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("MUJOCO_GL", "egl")


def pytest_report_header(config) -> str:
    return f"ROS_DOMAIN_ID={_DOMAIN_ID} (private to this session)"


@pytest.fixture(scope="session")
def ros_probe():
    """A node in the test process, on the session's domain, for talking to nodes under test."""
    from ros_harness import probe_node

    with probe_node() as node:
        yield node
