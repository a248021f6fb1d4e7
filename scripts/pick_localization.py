"""Does a higher-resolution camera let the pick expert find the cube well enough to grasp it?

Session 30 (docs/bootstrap.md) found that a small head picks 15-16 of 16 when it reads the cube's
*true* position, 8 of 16 with a 1.5 cm error and 2 of 16 with 3 cm, while the 64 px frames place the
cube to 2-5 cm and lose it under the hand. This diagnostic measures, for each camera size, what the
experts' own perception prior (`pretrain_vision` on `render_landmark_frames`, the shipped recipe)
gives and what a head can do with it:

1. localisation: the cube's keypoint, mapped onto the plane of the cube's centre, against its true
   position, over every frame of scripted pick demos, and in each demo's first frame (the arm at
   home, nothing in front of the cube);
2. control: a fresh MLP head trained on those demos to predict the chunk's hand motions (the
   experts' "ee" action space) from the cube's position minus the hand's plus the hand pose, then
   deployed on the 16 evaluation seeds (picked = the simulator's success predicate held at any step
   before the deadline). The cube position it reads is one of
   - `truth`: the simulator's (an upper bound; the head and the execution path are then all that
     can fail),
   - `current`: this frame's keypoint (what the experts read now),
   - `memory`: the first frame's keypoint, kept for the whole trial (the cube does not move before
     it is grasped),
   - `keypoints`: no table-plane mapping, what the experts read (`Backbone.argument_offsets`): the
     cube's keypoint minus the gripper's, now and in the first frame, in image coordinates.

Learning code only (no ROS); results go to `<out>/results.json` and are printed as a table.

    python scripts/pick_localization.py --sizes 64 128 --out runs/pick_localization
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import tyro
from torch import nn
from tqdm import tqdm

from robocoach_skills import action_contract
from robocoach_skills.checkpoint import jsonable
from robocoach_skills.composition import Composition
from robocoach_skills.constants import KEY_ACTION_CHUNK, KEY_ACTION_MASK, KEY_ROBOT_ID, LANDMARKS, OBS_PROPRIO
from robocoach_skills.data.episode import Episode
from robocoach_skills.evaluation import evaluation_seeds
from robocoach_skills.experts.config import ExpertConfig
from robocoach_skills.experts.model import ExpertLibrary, backbone_feature_size
from robocoach_skills.experts.perception import (
    PerceptionConfig,
    pretrain_vision,
    render_landmark_frames,
)
from robocoach_skills.operator import OperatorConfig, ScriptedOperator
from robocoach_skills.sim.ik import IKConfig
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_world.coach.probe import PROBE_SEED_BASE, probed_composition

SOURCES = ("truth", "current", "memory", "keypoints")
METRIC = ("truth", "current", "memory")  # sources that give the cube's position in metres
VISION_MODULES = ("convs", "norms", "keypoints")  # the backbone's modules the perception prior trains


@dataclass
class Config:
    """Camera sizes to compare, demos and trials per size, and the head's training."""

    sizes: tuple[int, ...] = (64, 128)  # square camera edges [px]
    robot: str = "franka"
    task: str = "pick_place_bin"  # its first subtask is the probed pick
    cube: str = "red_cube"  # the pick's object (landmark name)
    demos: int = 50  # accepted scripted demos per size
    trials: int = 16  # deployed trials per (size, source), from the fixed evaluation seeds
    deadline: int = 123  # policy steps a deployed pick may take (the bootstrap run's pick deadline)
    sources: tuple[str, ...] = SOURCES  # where the head's cube position comes from (module docstring)
    head_hidden: int = 256
    head_steps: int = 3000
    head_batch: int = 256
    head_lr: float = 1e-3
    seed: int = 0  # head initialisation and batches
    expert: ExpertConfig = field(
        default_factory=ExpertConfig
    )  # the backbone (its image_size is set per size)
    perception: PerceptionConfig = field(default_factory=PerceptionConfig)  # the prior's renders and training
    threads: int = 2
    out: Path = Path("runs/pick_localization")


@dataclass
class Demo:
    episode: Episode
    cube: np.ndarray  # (3,) the cube's true position at the start [m]


def plane_homography(scene: SimScene, height: float) -> np.ndarray:
    """3x3 map from pixel (column, row, 1) to the (x, y, 1) of the horizontal plane z = `height`,
    fitted by least squares to projected grid points (exact for a pinhole camera)."""
    xs, ys = np.meshgrid(np.linspace(0.2, 0.8, 7), np.linspace(-0.35, 0.35, 7))
    world = np.stack([xs.ravel(), ys.ravel(), np.full(xs.size, height)], axis=1)
    pixels = scene.project(world)
    rows = []
    for (u, v), (x, y, _) in zip(pixels, world, strict=True):
        rows.append([u, v, 1, 0, 0, 0, -x * u, -x * v, -x])
        rows.append([0, 0, 0, u, v, 1, -y * u, -y * v, -y])
    _, _, vt = np.linalg.svd(np.asarray(rows))
    return vt[-1].reshape(3, 3)


def to_plane(homography: np.ndarray, pixels: np.ndarray) -> np.ndarray:
    """Pixels (N, 2) -> plane points (N, 2) [m]."""
    h = np.concatenate([pixels, np.ones((len(pixels), 1))], axis=1) @ homography.T
    return h[:, :2] / h[:, 2:]


class CubeLocator:
    """The backbone's keypoint of the cube, as a point on the plane of the cube's centre."""

    def __init__(self, library: ExpertLibrary, scene: SimScene, cube: str, height: float) -> None:
        self.library, self.height = library, height
        self.channels = [LANDMARKS.index(cube), LANDMARKS.index("gripper")]
        size = scene.config.image_size
        self.size, self.features = size, backbone_feature_size(size, library.backbone.strides)
        self.homography = plane_homography(scene, height)

    @torch.inference_mode()
    def keypoints(self, images: np.ndarray) -> np.ndarray:
        """Frames (N, H, W, 3) uint8 -> the cube's and the gripper's keypoints (N, 2, 2), in [-1, 1]."""
        out = []
        for start in range(0, len(images), 256):
            x = torch.from_numpy(images[start : start + 256]).permute(0, 3, 1, 2).float() / 255.0
            keypoints, _ = self.library.backbone.vision(x)
            c = keypoints.shape[1] // 2
            out.append(torch.stack([keypoints[:, self.channels], keypoints[:, c:][:, self.channels]], -1))
        return torch.cat(out).numpy()

    def __call__(self, images: np.ndarray) -> np.ndarray:
        """Frames (N, H, W, 3) uint8 -> cube positions (N, 3) [m]."""
        # The inverse of perception.keypoint_coordinates.
        cells = (self.keypoints(images)[:, 0] + 1.0) / 2.0 * (self.features - 1)
        xy = to_plane(self.homography, (cells + 0.5) * self.size / self.features)
        return np.concatenate([xy, np.full((len(xy), 1), self.height)], axis=1)


def record_demos(scene: SimScene, composition: Composition, config: Config) -> list[Demo]:
    operator = ScriptedOperator(OperatorConfig(seed=0))
    demos, seed = [], PROBE_SEED_BASE
    with tqdm(total=config.demos, desc=f"demos {scene.config.image_size}px", leave=False) as bar:
        while len(demos) < config.demos:
            seed += 1
            scene.reset(composition, seed)
            cube = np.array(scene.privileged_state()["objects"][config.cube]["pos"], dtype=np.float64)
            episode = operator.demo_subtask(scene, composition, 0, seed)
            if episode.success:
                demos.append(Demo(episode, cube))
                bar.update()
    return demos


class PickHead(nn.Module):
    """(cube - hand xyz, or the image-plane offsets of `frame_features`; hand inputs) -> the chunk's hand
    motions (K, 5)."""

    def __init__(self, library: ExpertLibrary, hidden: int, metric: bool) -> None:
        super().__init__()
        self.library, self.metric = library, metric
        k, c = library.config.chunk_len, library.config.action_channels
        width = (3 if metric else 4) + 6
        self.net = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.out = nn.Linear(hidden, k * c)
        self.shape = (k, c)

    def inputs(self, features: torch.Tensor, proprio: torch.Tensor, robot: torch.Tensor) -> torch.Tensor:
        hand = self.library.hand_inputs(proprio, robot)  # (B, 6): x, y, z, cos, sin, gripper
        return torch.cat([features - hand[:, :3] if self.metric else features, hand], dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.net(x)).view(-1, *self.shape)


def chunks(episode: Episode, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every frame's next k actions (T, k, ACTION_DIM) padded past the end with the last, and the mask."""
    t = len(episode)
    index = np.minimum(np.arange(t)[:, None] + np.arange(k)[None], t - 1)
    actions = np.stack([action_contract.pad(episode.robot, a) for a in episode.actions])
    return actions[index], (np.arange(t)[:, None] + np.arange(k)[None]) < t


def frame_features(
    locate: CubeLocator, source: str, images: np.ndarray, first: np.ndarray, truth: np.ndarray
) -> np.ndarray:
    """What the head reads of the cube at each of `images` (N, H, W, 3), given the trial's first frame
    (H, W, 3) and the cube's true position (3,): (N, 3) positions, or (N, 4) for "keypoints"."""
    if source == "truth":
        return np.repeat(truth[None], len(images), axis=0)
    if source == "memory":
        return np.repeat(locate(first[None]), len(images), axis=0)
    if source == "current":
        return locate(images)
    now = locate.keypoints(images)  # (N, 2, 2): cube, gripper
    then = locate.keypoints(first[None])[0, 0]
    return np.concatenate([now[:, 0] - now[:, 1], then[None] - now[:, 1]], axis=1)


def train_head(
    library: ExpertLibrary, demos: list[Demo], locate: CubeLocator, source: str, config: Config
) -> PickHead:
    torch.manual_seed(config.seed)
    head = PickHead(library, config.head_hidden, metric=source in METRIC)
    features = [frame_features(locate, source, d.episode.images, d.episode.images[0], d.cube) for d in demos]
    k, robot = library.config.chunk_len, action_contract.robot_id(config.robot)
    parts = [chunks(d.episode, k) for d in demos]
    proprio = np.concatenate(
        [[action_contract.pad(config.robot, p) for p in d.episode.proprio] for d in demos]
    )
    batch = {
        KEY_ACTION_CHUNK: torch.from_numpy(np.concatenate([c for c, _ in parts])).float(),
        KEY_ACTION_MASK: torch.from_numpy(np.concatenate([m for _, m in parts])),
        OBS_PROPRIO: torch.from_numpy(proprio).float(),
        KEY_ROBOT_ID: torch.full((len(proprio),), robot),
    }
    with torch.no_grad():
        target, mask = library.delta_targets(batch)
        x = head.inputs(
            torch.from_numpy(np.concatenate(features)).float(), batch[OBS_PROPRIO], batch[KEY_ROBOT_ID]
        )
    optimizer = torch.optim.AdamW(head.parameters(), lr=config.head_lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(config.seed)
    for _ in tqdm(range(config.head_steps), desc="head", leave=False):
        rows = torch.randint(len(x), (config.head_batch,), generator=generator)
        error = (head(x[rows]) - target[rows]).abs() / library.action_scales
        loss = (error * mask[rows]).sum() / mask[rows].sum().clamp_min(1.0)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return head.eval()


@torch.inference_mode()
def deploy(
    head: PickHead,
    scene: SimScene,
    composition: Composition,
    locate: CubeLocator,
    source: str,
    config: Config,
) -> list[bool]:
    """Run the head from each evaluation seed; True where the pick succeeded before the deadline."""
    library, robot = head.library, torch.tensor([action_contract.robot_id(config.robot)])
    picked = []
    for seed in tqdm(evaluation_seeds(config.trials), desc=f"deploy {source}", leave=False):
        obs = scene.reset(composition, seed)
        scene.start_subtask(0)
        truth = np.array(scene.privileged_state()["objects"][config.cube]["pos"], dtype=np.float64)
        first = obs["image"]
        done, step = False, 0
        while step < config.deadline and not done:
            proprio = torch.from_numpy(action_contract.pad(config.robot, obs["proprio"])).float()[None]
            features = frame_features(locate, source, obs["image"][None], first, truth)
            delta = head(head.inputs(torch.from_numpy(features).float(), proprio, robot))  # (1, K, 5)
            hand = library.kinematics.hand_pose(proprio, robot)[:, None] + delta
            start = proprio[:, None].expand(-1, library.config.chunk_len, -1)
            joints = library.kinematics.solve_top_down(
                hand, start, robot, IKConfig(max_iters=library.config.ik_iters)
            )
            for action in action_contract.unpad(config.robot, joints[0].numpy()):
                obs = scene.step(action)
                step += 1
                done = scene.subtask_success(0)
                if done or step >= config.deadline:
                    break
        picked.append(done)
    return picked


def localisation(demos: list[Demo], locate: CubeLocator) -> dict:
    """Plane error [cm] of the cube's keypoint over every demo frame and over first frames."""
    every = np.concatenate(
        [np.linalg.norm((locate(d.episode.images) - d.cube)[:, :2], axis=1) for d in demos]
    )
    first = np.array([np.linalg.norm((locate(d.episode.images[:1])[0] - d.cube)[:2]) for d in demos])

    def stats(errors: np.ndarray) -> dict:
        cm = 100 * errors
        return {
            "median_cm": float(np.median(cm)),
            "p90_cm": float(np.percentile(cm, 90)),
            "under_1cm": float(np.mean(cm < 1)),
            "under_2cm": float(np.mean(cm < 2)),
        }

    return {"every_frame": stats(every), "first_frame": stats(first)}


def run_size(size: int, config: Config) -> dict:
    t0 = time.perf_counter()
    library = ExpertLibrary(replace(config.expert, image_size=size))
    cache = (
        config.out / f"backbone_{size}px.pt"
    )  # the prior is the slow part: reuse it (same --out, same run)
    if cache.exists():
        saved = torch.load(cache, weights_only=True)
        vision = {k: v for k, v in saved["state"].items() if k.split(".")[0] in VISION_MODULES}
        library.backbone.load_state_dict(vision, strict=False)  # only the prior: the rest is not read
        prior = saved["prior"]
    else:
        frames = render_landmark_frames(config.robot, config.perception, size)
        prior, _ = pretrain_vision(library.backbone, [frames], config.perception)
        torch.save({"state": library.backbone.cpu().state_dict(), "prior": prior}, cache)
    library.cpu().eval()
    composition = probed_composition(config.robot, config.task, 0)
    scene = SimScene(SceneConfig(robot=config.robot, image_size=size))
    try:
        demos = record_demos(scene, composition, config)
        height = float(np.mean([d.cube[2] for d in demos]))
        locate = CubeLocator(library, scene, config.cube, height)
        result = {"size": size, "prior": prior, "localisation": localisation(demos, locate), "picked": {}}
        for source in config.sources:
            head = train_head(library, demos, locate, source, config)
            picked = deploy(head, scene, composition, locate, source, config)
            result["picked"][source] = int(sum(picked))
            print(f"{size}px {source}: {sum(picked)}/{len(picked)} picked", flush=True)
    finally:
        scene.close()
    result["seconds"] = time.perf_counter() - t0
    return result


def main(config: Config) -> list[dict]:
    torch.set_num_threads(config.threads)
    config.out.mkdir(parents=True, exist_ok=True)
    results = []
    for size in config.sizes:
        results.append(run_size(size, config))
        payload = {"config": jsonable(asdict(config)), "results": results}
        (config.out / "results.json").write_text(json.dumps(payload, indent=2))
    print(
        "| camera | cube error, every demo frame: median / p90 / <1 cm | first frame: median / p90 / <1 cm |"
        f" picked of {config.trials}: {' / '.join(config.sources)} |"
    )
    for r in results:
        e, f = r["localisation"]["every_frame"], r["localisation"]["first_frame"]
        picks = " / ".join(str(r["picked"][s]) for s in config.sources)
        print(
            f"| {r['size']} px | {e['median_cm']:.1f} / {e['p90_cm']:.1f} cm / {e['under_1cm']:.0%} "
            f"| {f['median_cm']:.1f} / {f['p90_cm']:.1f} cm / {f['under_1cm']:.0%} | {picks} |"
        )
    return results


if __name__ == "__main__":
    main(tyro.cli(Config))
