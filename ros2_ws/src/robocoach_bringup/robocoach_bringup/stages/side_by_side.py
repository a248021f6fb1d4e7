"""Stage work that runs one process per arm, side by side: simulator rendering is the cost, and each
arm's scene is independent of the other's (corpus recording: 1.85x on 2 cores, see docs/results.md).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def side_by_side(calls: Sequence[tuple[Callable[..., Any], tuple]]) -> list[Any]:
    """`function(*args)` for every call, each in its own process, all at once; results in call order.

    Spawn, not fork: the earlier stages leave ROS and torch threads behind, and a forked child of a
    threaded process can deadlock (it did: the workers sat idle forever). The first error raises.
    """
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=len(calls), mp_context=spawn) as pool:
        futures = [pool.submit(function, *args) for function, args in calls]
        return [future.result() for future in futures]
