"""The `LoadAdapter` service body shared by every node that runs experts (executor, world model).

A swap happens under the node's model lock, between inference steps, never during one; a failed
load leaves the previous version active and sends the reason back to the caller.
"""

from __future__ import annotations

import threading

from robocoach_msgs.srv import LoadAdapter
from robocoach_skills.experts.artifacts import ArtifactLoadError
from robocoach_skills.experts.model import ExpertLibrary
from robocoach_skills.experts.registry import AdapterRegistry


def serve_load_adapter(
    node,
    lock: threading.Lock,
    registry: AdapterRegistry,
    library: ExpertLibrary,
    versions: dict[str, int],
    request: LoadAdapter.Request,
    response: LoadAdapter.Response,
) -> LoadAdapter.Response:
    """Activate the requested adapter version in `library` and record it in `versions`."""
    with lock:
        try:
            registry.load_request(library, request.skill, request.version, request.uri)
            versions[request.skill] = request.version
            response.success, response.message = True, f"{request.skill} v{request.version} active"
        except (ArtifactLoadError, KeyError, ValueError) as error:
            response.success, response.message = False, str(error)
        response.active_version = versions.get(request.skill, 0)
    summary = f"LoadAdapter {request.skill} v{request.version}: {response.message}"
    if response.success:  # one severity per call site: rclpy refuses a call site that changes it
        node.get_logger().info(summary)
    else:
        node.get_logger().error(summary)
    return response
