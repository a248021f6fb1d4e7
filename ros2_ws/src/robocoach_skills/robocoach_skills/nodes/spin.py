"""One `main` body for every RoboCoach node, using only rclpy API common to Humble, Jazzy and Kilted.

(`with rclpy.init():` is Jazzy+, so init/shutdown are explicit here.) Ctrl-C and an external
shutdown end the node quietly; anything else propagates with its traceback.
"""

from __future__ import annotations

from collections.abc import Callable

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node


def spin_node(make_node: Callable[[], Node], args: list[str] | None = None, threads: int = 1) -> Node | None:
    """Init rclpy, build the node, spin it (multi-threaded when `threads` > 1), clean up on exit.

    Returns the (destroyed) node, whose attributes a `main` may read for its exit status; None if
    it was interrupted while being built.

    Nodes with action servers that run long goals need `threads` >= 2 so cancel requests and
    other callbacks are served while a goal executes.
    """
    rclpy.init(args=args)
    node = None
    try:
        node = make_node()
        if threads > 1:
            executor = MultiThreadedExecutor(num_threads=threads)
            executor.add_node(node)
            executor.spin()
        else:
            rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if (
            rclpy.ok()
        ):  # a real error; not a callback that raced the shutdown (publishing into a dead context)
            raise
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return node
