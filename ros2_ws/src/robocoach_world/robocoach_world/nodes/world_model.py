"""`world_model` node: the `Imagine` action over CoachWorld, the progress judge and a copy of the experts.

A goal names a composition and real initial observations (camera frames + joint states); the node
rolls the composition's experts out closed-loop inside CoachWorld (`robocoach_world.imagine`), judges
every rollout, and answers with one JudgeVerdict and one FailureRecord per trial, plus the imagined
frames and judge trace of every trial (`return_frames`) or of the first failures per subtask
(`failure_clips`, what the coach shows the operator). Feedback reports imagined steps and finished
trials; cancel stops between two imagined steps. The newest imagined frame of the first trial is
published on TOPIC_IMAGINED_IMAGE for rviz. `LoadAdapter` (on its own name)
keeps this copy of the experts in step with the executor's after a coaching round.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import torch
from rclpy.action import ActionServer, CancelResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image

from robocoach_msgs.action import Imagine
from robocoach_msgs.msg import FailureRecord, JudgeVerdict
from robocoach_msgs.srv import LoadAdapter
from robocoach_skills.bootstrap import load_experts
from robocoach_skills.composition import Composition, UnknownSkillError
from robocoach_skills.constants import ACTION_IMAGINE, SERVICE_WORLD_LOAD_ADAPTER, TOPIC_IMAGINED_IMAGE
from robocoach_skills.device import select_device
from robocoach_skills.nodes.adapter_service import serve_load_adapter
from robocoach_skills.nodes.conversions import (
    image_to_msg,
    joint_states_to_proprio,
    msg_to_composition,
    msg_to_image,
)
from robocoach_skills.nodes.spin import spin_node
from robocoach_skills.skill_policy import ChunkExecutionConfig
from robocoach_world.imagine import ImaginationConfig, ImaginedTrial, failure_examples, imagine_composition
from robocoach_world.judge.checkpoint import DEADLINES_FILE, load_judge
from robocoach_world.judge.verdict import Deadlines
from robocoach_world.records import SOURCE_IMAGINED
from robocoach_world.world.artifacts import checkpoint_in, load_world

IMAGE_QOS = QoSProfile(depth=2, reliability=ReliabilityPolicy.BEST_EFFORT)  # rviz wants the newest frame


class GoalCanceledError(Exception):
    """Raised between imagined steps when the client cancels the goal."""


class WorldModelNode(Node):
    def __init__(self) -> None:
        super().__init__("world_model")
        declare = self.declare_parameter
        world_dir = declare("world_dir", "runs/world").value  # world.train's --out, or its checkpoint dir
        judge_dir = declare("judge_dir", "runs/judge").value  # checkpoint written by judge.train
        deadlines_file = declare("deadlines_file", "").value  # "" = <judge_dir>/deadlines.json
        experts_dir = declare("experts_dir", "").value  # backbone + adapters (the executor's registry)
        device = select_device(declare("device", "").value or None)  # "" = CUDA when present
        self.n_action_steps = declare(
            "n_action_steps", ChunkExecutionConfig.n_action_steps
        ).value  # as the executor's parameter
        self.fps = declare("policy_rate_hz", 10.0).value  # imagined steps per second of robot time
        self.seed = declare("seed", 0).value  # world-model noise seed of the first goal (+1 per goal)
        torch.set_num_threads(declare("torch_threads", 1).value)
        if not experts_dir:
            raise ValueError("parameter experts_dir is required (a directory written by bootstrap training)")

        self.world, _ = load_world(checkpoint_in(Path(world_dir)), device)
        self.judge, self.verdict, _ = load_judge(Path(judge_dir), device)
        self.deadlines = Deadlines.load(Path(deadlines_file or Path(judge_dir) / DEADLINES_FILE))
        self.verdict = self.deadlines.verdict_config(self.verdict)  # the rule the deadlines were set under
        self.library, self.registry, self.versions, _ = load_experts(Path(experts_dir))
        self.library.to(device)
        self._model_lock = threading.Lock()  # an adapter swap waits for the running goal to end
        self._goals = 0

        self._image_pub = self.create_publisher(Image, TOPIC_IMAGINED_IMAGE, IMAGE_QOS)
        self.create_service(
            LoadAdapter,
            SERVICE_WORLD_LOAD_ADAPTER,
            self._on_load_adapter,
            callback_group=ReentrantCallbackGroup(),
        )
        self._action_server = ActionServer(
            self,
            Imagine,
            ACTION_IMAGINE,
            execute_callback=self._execute,
            cancel_callback=lambda _goal: CancelResponse.ACCEPT,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        self.get_logger().info(
            f"imagining on {ACTION_IMAGINE} ({device}) with {world_dir}, judge {judge_dir}, "
            f"experts {sorted(self.versions.items())}"
        )

    # ------------------------------------------------------------------ Imagine
    def _execute(self, goal_handle) -> Imagine.Result:
        request = goal_handle.request
        try:
            composition, images, proprio = self._initial_observations(request)
        except (ValueError, UnknownSkillError) as error:
            self.get_logger().error(f"Imagine goal refused: {error}")
            goal_handle.abort()
            return Imagine.Result()
        config = ImaginationConfig(
            num_rollouts=request.num_rollouts,
            num_world_seeds=request.num_world_seeds or ImaginationConfig.num_world_seeds,
            agreement=min(
                ImaginationConfig.agreement, request.num_world_seeds or ImaginationConfig.agreement
            ),
            horizon=request.horizon or ImaginationConfig.horizon,
            n_action_steps=self.n_action_steps,
            seed=self.seed + self._goals,
            keep_frames=request.return_frames or request.failure_clips > 0,
        )
        self._goals += 1

        def on_step(step: int, finished: int, frames: torch.Tensor) -> None:
            if goal_handle.is_cancel_requested:
                raise GoalCanceledError
            goal_handle.publish_feedback(Imagine.Feedback(steps_done=step, rollouts_done=finished))
            self._image_pub.publish(image_to_msg(frames[0].cpu().numpy(), self.get_clock().now().to_msg()))

        try:
            with self._model_lock:
                trials = imagine_composition(
                    self.world, self.judge, self.library, self.deadlines, composition, images, proprio,
                    config, versions=self.versions, initial_seeds=list(request.initial_state_seeds) or None,
                    verdict=self.verdict, fps=self.fps, on_step=on_step,
                )  # fmt: skip
        except GoalCanceledError:
            self.get_logger().info("Imagine goal canceled")
            goal_handle.canceled()
            return Imagine.Result()
        except (ValueError, KeyError) as error:  # e.g. a skill with no calibrated deadline
            self.get_logger().error(f"Imagine goal failed: {error}")
            goal_handle.abort()
            return Imagine.Result()
        result = self._result(trials, composition, request)
        valid = sum(t.record.valid for t in trials)
        successes = sum(t.record.valid and t.record.success for t in trials)
        self.get_logger().info(
            f"imagined {len(trials)} trials of {composition.name}: {valid} valid, {successes} succeeded"
        )
        goal_handle.succeed()
        return result

    def _initial_observations(self, request: Imagine.Goal) -> tuple[Composition, np.ndarray, np.ndarray]:
        """The goal's composition and initial observations as arrays; ValueError when malformed."""
        composition = msg_to_composition(request.composition)
        if request.num_rollouts < 1:
            raise ValueError("num_rollouts must be >= 1")
        if not request.initial_frames or len(request.initial_frames) != len(request.initial_proprio):
            raise ValueError(
                f"need one initial joint state per initial frame, got {len(request.initial_frames)} "
                f"frames and {len(request.initial_proprio)} joint states"
            )
        seeds = request.initial_state_seeds
        if len(seeds) not in (0, len(request.initial_frames)):
            raise ValueError(f"{len(seeds)} initial_state_seeds for {len(request.initial_frames)} frames")
        images = np.stack([msg_to_image(f) for f in request.initial_frames])
        size = self.world.config.image_size
        if images.shape[1:3] != (size, size):
            raise ValueError(f"initial frames are {images.shape[1:3]}, CoachWorld reads {size}x{size}")
        return composition, images, joint_states_to_proprio(request.initial_proprio, composition.robot)

    def _result(
        self, trials: list[ImaginedTrial], composition: Composition, request: Imagine.Goal
    ) -> Imagine.Result:
        result = Imagine.Result()
        stamp = self.get_clock().now().to_msg()
        for trial in trials:
            record, outcome = trial.record, trial.seeds[0]
            result.verdicts.append(
                JudgeVerdict(
                    composition=composition.name,
                    progress=outcome.progress,
                    completed=[t >= 0 for t in outcome.switch_times],
                    switch_times=outcome.switch_times,
                    first_failed_index=record.first_failed_index,
                    success=record.success,
                    confidence=trial.confidence,
                )
            )
            result.verdicts[-1].header.stamp = stamp
            result.records.append(
                FailureRecord(
                    composition=record.composition,
                    robot=record.robot,
                    expert_skills=list(record.skills),
                    expert_versions=list(record.versions),
                    first_failed_index=record.first_failed_index,
                    first_failed_skill=record.failed_pair[1] if record.failed_pair else "",
                    initial_state_id=record.initial_state_id,
                    seed=record.seed,
                    source=FailureRecord.SOURCE_IMAGINED
                    if record.source == SOURCE_IMAGINED
                    else FailureRecord.SOURCE_DEPLOYED,
                    valid=record.valid,
                )
            )
            result.records[-1].header.stamp = stamp
        shown = (
            range(len(trials)) if request.return_frames else failure_examples(trials, request.failure_clips)
        )
        for k in shown:
            trial = trials[k]
            result.frame_trials.append(k)
            result.frame_counts.append(len(trial.frames))
            result.frames.extend(image_to_msg(frame) for frame in trial.frames)
            result.frame_progress.extend(trial.trace.tolist())
            result.frame_subtasks.extend(trial.active.tolist())
        return result

    # ------------------------------------------------------------------ experts
    def _on_load_adapter(
        self, request: LoadAdapter.Request, response: LoadAdapter.Response
    ) -> LoadAdapter.Response:
        return serve_load_adapter(
            self, self._model_lock, self.registry, self.library, self.versions, request, response
        )


def main(args: list[str] | None = None) -> None:
    spin_node(WorldModelNode, args, threads=3)


if __name__ == "__main__":
    main()
