"""The progress judge as the router's completion detector, registered as "judge".

On the robot the router then switches subtasks by the very rule imagination uses (`DoneRule` over
`BatchedJudge` progress), so a deployed trial and its imagined twin are judged alike. Importing
this module registers the detector:

    args, deadlines = judge_detector_args(Path("runs/judge"), "franka")
    router = Router(policy, RouterConfig(detector="judge",
                                         skill_deadline_steps=deadlines.per_skill("franka", policy.skills())),
                    detector_args=args)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from robocoach_skills.action_contract import pad
from robocoach_skills.composition import Subtask
from robocoach_skills.constants import OBS_IMAGE, OBS_PROPRIO
from robocoach_skills.router import CompletionDetector, RouterConfig, register_detector
from robocoach_world.judge.checkpoint import DEADLINES_FILE, load_judge
from robocoach_world.judge.model import ProgressJudge
from robocoach_world.judge.verdict import BatchedJudge, Deadlines, DoneRule, VerdictConfig


@register_detector("judge")
class JudgeDetector(CompletionDetector):
    """Done once the judge's done score on the frames since the subtask started passes the rule."""

    reads_done_probability = False

    def __init__(
        self, config: RouterConfig, judge: ProgressJudge, robot: str, verdict: VerdictConfig | None = None
    ) -> None:
        self.robot = robot
        self.online = BatchedJudge(judge, rows=1)
        self.rule = DoneRule(verdict or VerdictConfig(), rows=1)
        self.progress = 0.0  # latest judged progress of the active subtask
        self.skill = ""

    def reset(self, subtask: Subtask) -> None:
        self.skill = subtask.skill
        self.online.reset_rows([0], [subtask], self.robot)
        self.rule.reset_rows([0])
        self.progress = 0.0

    def update(self, obs: dict, done_prob: float, action: np.ndarray) -> bool:
        proprio = obs.get(OBS_PROPRIO)  # camera-only observations: only a frames-only judge reads them
        hand = None if proprio is None else pad(self.robot, np.asarray(proprio, dtype=np.float32)[None])
        self.progress = float(self.online.update(obs[OBS_IMAGE][None], hand)[0])
        gripper = None if proprio is None else proprio[-1:]
        command = np.asarray(action, dtype=np.float32)[-1:]
        return bool(self.rule.update(self.online.done, [self.skill], gripper, command)[0])


def judge_detector_args(
    judge_dir: Path, robot: str, device: torch.device | str = "cpu"
) -> tuple[dict, Deadlines]:
    """Router `detector_args` for the judge in `judge_dir` on `robot`, and its frozen deadlines.

    The done rule is the one the deadlines were calibrated under, as in imagination.
    """
    judge, verdict, _ = load_judge(judge_dir, device)
    deadlines = Deadlines.load(Path(judge_dir) / DEADLINES_FILE)
    return {"judge": judge, "robot": robot, "verdict": deadlines.verdict_config(verdict)}, deadlines
