"""What in an adapter update lets an expert learn a subtask from new demos, and how do its trials fail?

Session 37 (docs/bootstrap.md): a 50-demo Franka pick update did not pick more often than the
bootstrap (8 -> 5 of 16 in `robocoach probe`). This deploys one run's experts from the fixed
evaluation seeds, each after updating one skill's adapter on the same demos (a probe's `demos/`
store) in one of these ways:

- `bootstrap`: no update;
- `dense`: the update as the library was saved (until session 37: LoRA on `fuse` and `trunk` only);
- `conv`: the same adapter given LoRA on every backbone layer, the added layers at identity (what a
  bootstrap with session 37's default holds), then updated: the convolutions may move its keypoints;
- `backbone`: `dense` with the shared backbone trained too (outside the modular design: it changes
  every skill; a reference for what the frozen backbone costs).

Each update variant runs once per data order (`data_seeds`). Every trial runs to the subtask's
deadline (done threshold 1.0) and, for a pick, is sorted by how it ended: `picked`, `never_closed`,
`closed_missed` (the gripper closed with no cube between the fingers; the hand's xy offset from the
cube and its height above it at the close are kept) or `grasped_not_lifted` (held, not lifted, or
dropped, by the deadline). The action L1 on the training demos (and on `val_demos`, when given)
shows how well each update fits. Results go to `<out>/results.json`, with an exact McNemar test of
each variant against `dense` over the paired trials.

    robocoach probe --experts <run>/experts --task pick_place_bin --demos 50 --out runs/probe_pick
    python scripts/update_ablation.py --experts <run>/experts --demos runs/probe_pick/demos
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import tyro
from torch.utils.data import DataLoader
from tqdm import tqdm

from robocoach_skills.bootstrap import load_experts
from robocoach_skills.checkpoint import jsonable
from robocoach_skills.constants import KEY_ROBOT_ID
from robocoach_skills.data.dataset import DatasetConfig, EpisodeDataset
from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.evaluation import GroundTruthMonitor, evaluation_seeds
from robocoach_skills.experts.model import ExpertLibrary
from robocoach_skills.experts.train import update_adapter
from robocoach_skills.measures import mcnemar_exact, paired_discordance
from robocoach_skills.router import Router, RouterConfig
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.skill_policy import LibraryPolicy
from robocoach_world.coach.probe import probed_composition

VARIANTS = ("bootstrap", "dense", "conv", "backbone")
CLOSED_BELOW = 0.5  # the gripper counts as closing once its command falls below this share of the first


@dataclass
class Config:
    experts: Path  # a run's expert library folder (read only)
    demos: Path  # episode store of the skill's new demos (a probe's demos/)
    val_demos: Path | None = None  # held-out demos of the same subtask, for the action L1 only
    robot: str = "franka"
    task: str = "pick_place_bin"
    subtask: int = 0  # index of the updated subtask in the composition
    variants: tuple[str, ...] = VARIANTS
    steps: int = 300  # optimiser steps per update (the coach's ImproveConfig.steps)
    batch_size: int = 64
    data_seeds: tuple[int, ...] = (1, 2, 3)  # one update per data order and variant
    trials: int = 32  # deployed trials per variant and data order, from the evaluation seeds
    threads: int = 1
    out: Path = Path("runs/update_ablation")

    def __post_init__(self) -> None:
        unknown = sorted(set(self.variants) - set(VARIANTS))
        if unknown:
            raise ValueError(f"unknown variants {unknown}; choose from {VARIANTS}")


class GraspLog:
    """The scene as the router's environment, keeping the hand, the object and the gripper command."""

    def __init__(self, scene: SimScene, obj: str | None) -> None:
        self.scene, self.obj, self.steps = scene, obj, []

    def reset(self, composition, seed):
        self.steps = []
        return self.scene.reset(composition, seed)

    def step(self, action):
        obs = self.scene.step(action)
        state = self.scene.privileged_state()
        cube = state["objects"].get(self.obj)
        if cube is not None:
            self.steps.append(
                (state["ee_pos"].copy(), cube["pos"].copy(), state["gripper_command"], cube["grasped"])
            )
        return obs


def grasp_anatomy(steps: list, completed: bool) -> dict:
    """How a pick trial ended, from its GraspLog (see the module docstring)."""
    if not steps:
        return {"mode": "picked" if completed else "failed"}
    ee, cube = np.array([s[0] for s in steps]), np.array([s[1] for s in steps])
    grip, grasped = np.array([s[2] for s in steps]), np.array([s[3] for s in steps])
    closing = np.flatnonzero(grip < CLOSED_BELOW * grip[0])
    out = {"cube_lift_cm": float(100 * (cube[:, 2].max() - cube[0, 2]))}
    if len(closing):
        t = int(closing[0])
        out |= {
            "close_step": t,
            "close_xy_offset_cm": float(100 * np.linalg.norm(ee[t, :2] - cube[t, :2])),
            "close_height_cm": float(100 * (ee[t, 2] - cube[t, 2])),
        }
    if completed:
        mode = "picked"
    elif not len(closing):
        mode = "never_closed"
    elif grasped[closing[0] :].any():
        mode = "grasped_not_lifted"
    else:
        mode = "closed_missed"
    return {"mode": mode, **out}


def with_lora_on_every_layer(library: ExpertLibrary, skill: str) -> ExpertLibrary:
    """A copy whose `skill` adapter has LoRA on every backbone layer, those it lacked at identity."""
    out = copy.deepcopy(library)
    old = out.adapter(skill)
    out.backbone.lora_targets = out.config.backbone_layer_names()
    out.config = replace(out.config, lora_layers=None)
    out.adapters[skill] = out.backbone.new_adapter().to(out.device)
    with torch.no_grad():
        for name, low in old.layers.items():
            out.adapters[skill].layers[name].load_state_dict(low.state_dict())
    return out


def demo_dataset(root: Path, library: ExpertLibrary) -> EpisodeDataset:
    """Every episode of the store at `root`, as the library's updates read them (built once: it caches
    decoded episodes)."""
    return EpisodeDataset(
        EpisodeStore(root), DatasetConfig(chunk_len=library.config.chunk_len, pad_channels=True)
    )


def updated(
    library: ExpertLibrary, skill: str, variant: str, dataset: EpisodeDataset, seed: int, config: Config
):
    """(a copy of `library` with `skill` updated as `variant` says, training metrics)."""
    if variant == "bootstrap":
        return library, {}
    lib = with_lora_on_every_layer(library, skill) if variant == "conv" else copy.deepcopy(library)
    lib.config = replace(lib.config, freeze_backbone=variant != "backbone")
    loader = DataLoader(
        dataset, batch_size=config.batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed)
    )
    metrics, _ = update_adapter(lib, skill, loader, config.steps, progress=False)
    return lib, metrics


@torch.no_grad()
def action_l1(library: ExpertLibrary, skill: str, dataset: EpisodeDataset) -> float:
    """Mean action L1 (the training loss's, in action_scale units) over every sample of `dataset`."""
    total, rows = 0.0, 0
    for batch in DataLoader(dataset, batch_size=256):
        n = len(batch[KEY_ROBOT_ID])
        total += library(batch, skill)[1]["action_l1"] * n
        rows += n
    return total / rows


def main(config: Config) -> dict:
    torch.set_num_threads(config.threads)
    composition = probed_composition(config.robot, config.task, config.subtask)
    subtask = composition.subtasks[config.subtask]
    base, _, versions, deadlines = load_experts(config.experts)
    scene = SimScene(SceneConfig(robot=config.robot))
    env = GraspLog(scene, subtask.object if subtask.skill == "pick" else None)
    demos = demo_dataset(config.demos, base)
    val = demo_dataset(config.val_demos, base) if config.val_demos else None
    seeds = evaluation_seeds(config.trials)
    runs = [(v, s) for v in config.variants for s in (config.data_seeds if v != "bootstrap" else (None,))]
    results = []
    for variant, seed in tqdm(runs, desc="variants"):
        library, metrics = updated(base, subtask.skill, variant, demos, seed or 0, config)
        router = Router(
            LibraryPolicy(library, versions), RouterConfig(done_threshold=1.0, skill_deadline_steps=deadlines)
        )
        trials = []
        for trial_seed in seeds:
            monitor = GroundTruthMonitor(scene)
            router.run(env, composition, trial_seed, monitor)
            completed = all(monitor.summary(config.subtask + 1)["completed"])
            trials.append({"seed": trial_seed, "completed": completed, **grasp_anatomy(env.steps, completed)})
        row = {
            "variant": variant,
            "data_seed": seed,
            "completed": sum(t["completed"] for t in trials),
            "modes": dict(Counter(t["mode"] for t in trials)),
            "train_l1": action_l1(library, subtask.skill, demos),
            "val_l1": action_l1(library, subtask.skill, val) if val else None,
            "update_seconds": metrics.get("train/seconds"),
            "trials": trials,
        }
        results.append(row)
        tqdm.write(f"{variant} (data seed {seed}): {row['completed']}/{len(trials)} {row['modes']}")
    scene.close()
    report = {"config": jsonable(asdict(config)), "subtask": str(subtask), "runs": results, "tests": {}}
    pooled = {
        v: [t["completed"] for r in results if r["variant"] == v for t in r["trials"]] for v in VARIANTS
    }
    for variant in config.variants:
        if variant != "dense" and "dense" in config.variants and len(pooled[variant]) == len(pooled["dense"]):
            only_dense, only_this = paired_discordance(pooled["dense"], pooled[variant])
            report["tests"][variant] = {
                "only_dense": only_dense,
                "only_this": only_this,
                "mcnemar_p": mcnemar_exact(only_dense, only_this),
            }
    config.out.mkdir(parents=True, exist_ok=True)
    (config.out / "results.json").write_text(json.dumps(report, indent=1))
    print(
        f"\n{subtask}: completed of {config.trials} trials per update (data seeds {list(config.data_seeds)})"
    )
    for variant in config.variants:
        rows = [r for r in results if r["variant"] == variant]
        counts = ", ".join(str(r["completed"]) for r in rows)
        modes = sum((Counter(r["modes"]) for r in rows), Counter())
        test = report["tests"].get(variant)
        vs = f"; vs dense: McNemar p = {test['mcnemar_p']:.3f}" if test else ""
        print(f"  {variant:9s} {counts:12s} {dict(modes)}{vs}")
    return report


if __name__ == "__main__":
    main(tyro.cli(Config))
