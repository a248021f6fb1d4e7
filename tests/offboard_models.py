"""Real but untrained offboard checkpoints (CoachWorld, judge + deadlines) and briefly trained experts.

Node and coach tests need the files the nodes load, not good models: these are written through the
same save functions training uses, at the sizes the nodes read (64 px frames from the sim).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from robocoach_skills.bootstrap import ExpertTrainingConfig, train_bootstrap_experts
from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_skills.experts import ExpertConfig
from robocoach_skills.operator import OperatorConfig, ScriptedOperator
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import get_composition
from robocoach_world.judge.checkpoint import DEADLINES_FILE, save_judge
from robocoach_world.judge.model import JudgeConfig, ProgressJudge
from robocoach_world.judge.verdict import Deadlines, VerdictConfig
from robocoach_world.world.artifacts import save_world
from robocoach_world.world.model import CoachWorld, WorldConfig

IMAGE_SIZE = 64
# The experts these helpers train exercise the plumbing, not learning. Without a perception prior nothing
# freezes the conv LoRAs of the default config (session 37), so pretraining would backpropagate through
# them (about 3x a step's cost); LoRA on the dense layers keeps these experts what CI passed with before.
PLUMBING_LORA_LAYERS = ("fuse", "trunk")


def train_scripted_experts(
    root: Path,
    robot: str,
    task: str,
    subtasks: Sequence[int] | None = None,
    demos_per_subtask: int = 1,
    steps: int = 20,
    seed: int = 1,
    expert: ExpertConfig | None = None,
) -> Path:
    """<root>/experts trained for `steps` on scripted demos of `task`'s subtasks from initial state `seed`
    (`expert`: the default ExpertConfig with PLUMBING_LORA_LAYERS).

    Demo k of subtask i is recorded by an operator seeded i + k; the demos go to <root>/episodes.
    """
    torch.set_num_threads(1)
    store = EpisodeStore.create(root / "episodes", StoreInfo(fps=10.0, image_size=(IMAGE_SIZE, IMAGE_SIZE)))
    scene = SimScene(SceneConfig(robot=robot, image_size=IMAGE_SIZE))
    composition = get_composition(robot, task)
    for k in range(demos_per_subtask):
        for index in subtasks if subtasks is not None else range(len(composition.subtasks)):
            operator = ScriptedOperator(OperatorConfig(seed=index + k))
            store.add(operator.demo_subtask(scene, composition, index, seed=seed))
    scene.close()
    # No perception prior: these experts exercise the plumbing (tests/experts/test_perception.py covers it).
    expert = expert or ExpertConfig(lora_layers=PLUMBING_LORA_LAYERS)
    training = ExpertTrainingConfig(steps=steps, expert=expert, perception=None)
    train_bootstrap_experts(store, root / "experts", training, show_progress=False)
    return root / "experts"


def write_offboard_models(root: Path, robot: str, task: str, deadline_steps: int) -> dict[str, Path]:
    """experts (train_scripted_experts), untrained world and judge (with deadlines) dirs."""
    torch.manual_seed(0)
    train_scripted_experts(root, robot, task)
    save_world(root / "world", CoachWorld(WorldConfig(image_size=IMAGE_SIZE)), {"metrics": {}})
    judge = ProgressJudge(JudgeConfig(image_size=IMAGE_SIZE))
    save_judge(root / "judge", judge, VerdictConfig(), {"val_mae": float("nan")})
    skills = {s.skill: deadline_steps for s in get_composition(robot, task).subtasks}
    Deadlines({robot: skills}).save(root / "judge" / DEADLINES_FILE)
    return {
        "experts": root / "experts",
        "world": root / "world",
        "judge": root / "judge",
        "store": root / "episodes",
    }
