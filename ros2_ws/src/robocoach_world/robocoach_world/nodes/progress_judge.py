"""`progress_judge` node: judges a rollout's camera frames, proprio and actions on request (`JudgeRollout`).

The request's frames, proprio and composition become numpy and a Composition (robocoach_skills
conversions), `judge_episode` segments and judges them with the checkpoint's done rule and the frozen
deadlines, and the reply carries the verdict and a per-frame trace. A malformed request (unknown robot
or skill, an image that is not rgb8/bgr8 or not the judge's size, no frames, proprio that is missing,
not one row of the arm's joints + gripper per frame or not finite, actions likewise where sent, a
non-positive frame period) is answered with ok=false and the reason; the node keeps serving.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rclpy.node import Node
from rclpy.qos import qos_profile_services_default
from sensor_msgs.msg import JointState

from robocoach_msgs.msg import JudgeVerdict, SubtaskProgress
from robocoach_msgs.srv import JudgeRollout
from robocoach_skills.composition import Composition
from robocoach_skills.constants import SERVICE_JUDGE_ROLLOUT
from robocoach_skills.device import select_device
from robocoach_skills.nodes.conversions import joint_states_to_proprio, msg_to_composition, msg_to_image
from robocoach_skills.nodes.spin import spin_node
from robocoach_world.judge.checkpoint import DEADLINES_FILE, load_judge
from robocoach_world.judge.verdict import Deadlines, Verdict, VideoClip, judge_episode


def trace_msgs(verdict: Verdict, composition: Composition, fps: float) -> list[SubtaskProgress]:
    """One SubtaskProgress per frame: judged-active subtask, its progress, done yet, time on it."""
    msgs, start = [], 0
    for t, (index, progress) in enumerate(zip(verdict.active.tolist(), verdict.trace.tolist(), strict=True)):
        if t > 0 and index != verdict.active[t - 1]:
            start = t
        switch = verdict.switch_times[index]
        msgs.append(
            SubtaskProgress(
                index=index,
                skill=composition.subtasks[index].skill,
                progress=float(progress),
                completed=bool(verdict.completed[index] and switch <= t / fps),
                elapsed=(t - start) / fps,
            )
        )
    return msgs


def per_frame(states: list[JointState], frames: int, robot: str, what: str) -> np.ndarray | None:
    """(T, joints + 1) rows of one JointState per frame; None where none were sent, ValueError where
    their number is not the frames' (`what` names them in the message) or a row is malformed."""
    if not states:
        return None
    if len(states) != frames:
        raise ValueError(f"{len(states)} {what} for {frames} frames")
    return joint_states_to_proprio(states, robot)


class ProgressJudgeNode(Node):
    def __init__(self) -> None:
        super().__init__("progress_judge")
        declare = self.declare_parameter
        judge_dir = declare("judge_dir", "runs/judge").value  # directory written by judge.train
        deadlines_file = declare("deadlines_file", "").value  # "" = <judge_dir>/deadlines.json
        device = declare("device", "").value  # "" = select_device (CUDA when present)

        self.judge, self.verdict_config, meta = load_judge(Path(judge_dir), select_device(device or None))
        self.deadlines = Deadlines.load(Path(deadlines_file or Path(judge_dir) / DEADLINES_FILE))
        self.verdict_config = self.deadlines.verdict_config(self.verdict_config)  # calibrated rule wins
        self.image_size = self.judge.config.image_size
        self.create_service(
            JudgeRollout, SERVICE_JUDGE_ROLLOUT, self._on_judge, qos_profile=qos_profile_services_default
        )
        val_mae = meta["metrics"].get("val_mae", float("nan"))
        self.get_logger().info(
            f"judging on {SERVICE_JUDGE_ROLLOUT} with {judge_dir} (val MAE {val_mae:.3f}), "
            f"deadlines for {sorted(self.deadlines.steps)}"
        )

    def _clip(self, request: JudgeRollout.Request) -> VideoClip:
        """The request as a VideoClip; ValueError with the reason when it is malformed."""
        if not request.frames:
            raise ValueError("no frames to judge")
        if not request.frame_period > 0:
            raise ValueError(f"frame_period must be > 0 s, got {request.frame_period}")
        composition = msg_to_composition(request.composition)
        images = np.stack([msg_to_image(f) for f in request.frames])  # (T, H, W, 3)
        if images.shape[1:3] != (self.image_size, self.image_size):
            raise ValueError(
                f"frames are {images.shape[1:3]}, the judge reads {self.image_size}x{self.image_size}"
            )
        return VideoClip(
            images,
            composition,
            1.0 / request.frame_period,
            self._proprio(request, composition),
            self._actions(request, composition),
        )

    def _proprio(self, request: JudgeRollout.Request, composition: Composition) -> np.ndarray | None:
        """(T, joints + 1) proprio of the request's frames; None where none was sent."""
        if not request.proprio and self.judge.config.hand:
            raise ValueError("no proprio: this judge reads the arm's joints and gripper with each frame")
        return per_frame(request.proprio, len(request.frames), composition.robot, "joint states")

    def _actions(self, request: JudgeRollout.Request, composition: Composition) -> np.ndarray | None:
        """(T, joints + 1) commands applied after the request's frames; None where none were sent."""
        return per_frame(request.actions, len(request.frames), composition.robot, "actions")

    def _on_judge(
        self, request: JudgeRollout.Request, response: JudgeRollout.Response
    ) -> JudgeRollout.Response:
        try:
            clip = self._clip(request)
            verdict = judge_episode(self.judge, clip, self.deadlines, self.verdict_config)
        except (ValueError, KeyError) as e:  # KeyError: no deadline for this (arm, skill)
            response.ok, response.message = False, str(e)
            self.get_logger().warning(f"refused JudgeRollout: {e}")
            return response
        response.ok = True
        response.verdict = JudgeVerdict(
            composition=verdict.composition,
            progress=[float(p) for p in verdict.progress],
            completed=verdict.completed,
            switch_times=[float(s) for s in verdict.switch_times],
            first_failed_index=verdict.first_failed,
            success=verdict.success,
            confidence=1.0,  # one real video: no world-model seeds to disagree
        )
        response.verdict.header.stamp = self.get_clock().now().to_msg()
        response.trace = trace_msgs(verdict, clip.composition, clip.fps)
        return response


def main(args: list[str] | None = None) -> None:
    spin_node(ProgressJudgeNode, args)
