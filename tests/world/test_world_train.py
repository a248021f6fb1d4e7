"""CoachWorld training on real MuJoCo episodes: it learns, it beats copy-last-frame, its CLIs run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_skills.operator import OperatorConfig, ScriptedOperator
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import get_composition
from robocoach_world.world.artifacts import load_world
from robocoach_world.world.data import WindowDataset, WindowSpec, is_held_out, select_episodes
from robocoach_world.world.evaluate import full_windows, open_loop_scores
from robocoach_world.world.model import CoachWorld, LossConfig, WorldConfig

torch.set_num_threads(1)  # the CPUs are shared; more threads only oversubscribe them

SIZE = 32
TINY = WorldConfig(image_size=SIZE, channels=(8, 16), embed_dim=64, hidden_dim=64, latent_dim=4, robot_dim=4)
TINY_FLAGS = [
    "--world.image-size", "32", "--world.channels", "8", "16", "--world.embed-dim", "32",
    "--world.hidden-dim", "32", "--world.latent-dim", "4", "--world.robot-dim", "4",
]  # fmt: skip


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> EpisodeStore:
    """Real subtask demos of both arms (32x32 frames): pick on the Franka twice, press on the PiPER."""
    root = tmp_path_factory.mktemp("world_data") / "store"
    store = EpisodeStore.create(root, StoreInfo(fps=10.0, image_size=(SIZE, SIZE)))
    operator = ScriptedOperator(OperatorConfig(seed=0))
    for robot, task, index, seeds in (
        ("franka", "pick_place_bin", 0, (1, 2)),
        ("piper", "press_push", 0, (1,)),
    ):
        scene = SimScene(SceneConfig(robot=robot, image_size=SIZE))
        for seed in seeds:
            store.add(operator.demo_subtask(scene, get_composition(robot, task), index, seed))
        scene.close()
    return store


def test_windows_follow_the_episode(store):
    spec = WindowSpec(history=2, horizon=3)
    dataset = WindowDataset([(store, i) for i in store.ids()], spec)
    episode = store.get(store.ids()[0])
    first, last = dataset[0], dataset[len(episode) - 2]
    assert torch.equal(first["history_images"][0], first["history_images"][1])  # padded with frame 0
    assert torch.equal(first["future_images"][0], torch.from_numpy(episode.images[1]))
    assert torch.equal(first["actions"][:, :7], torch.from_numpy(episode.actions[:3, :7]))
    assert last["valid"].tolist() == [True, False, False]  # t = T-2: only frame T-1 is real
    assert len(dataset) == sum(m.length - 1 for m in store.iter_meta())


def test_held_out_split_is_deterministic_and_disjoint(store):
    metas = list(store.iter_meta())
    assert [is_held_out(m, 0.5) for m in metas] == [is_held_out(m, 0.5) for m in metas]
    train = select_episodes([store.root], 0.5, held_out=False)
    held = select_episodes([store.root], 0.5, held_out=True)
    assert {i for _, i in train}.isdisjoint({i for _, i in held})
    assert len(train) + len(held) == len(metas)
    assert not select_episodes([store.root], 0.0, held_out=True)


@pytest.mark.slow
def test_tiny_model_learns_and_beats_copy_last_frame(store):
    """About 20 s of real training: loss falls and open-loop PSNR beats copying the last frame."""
    torch.manual_seed(0)
    dataset = WindowDataset([(store, i) for i in store.ids()], WindowSpec(history=2, horizon=4))
    model = CoachWorld(TINY)
    loss_config = LossConfig()
    shuffled = torch.Generator().manual_seed(1)
    probe = next(iter(DataLoader(dataset, batch_size=64, shuffle=True, generator=shuffled)))

    def probe_loss() -> float:
        torch.manual_seed(123)
        with torch.no_grad():
            return model(probe, loss_config)[1]["image_mse"]

    before = probe_loss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = DataLoader(dataset, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(0))
    steps = 0
    while steps < 200:
        for batch in loader:
            loss, _ = model(batch, loss_config)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
            if steps == 200:
                break
    after = probe_loss()
    assert after < 0.7 * before, (before, after)
    scores = open_loop_scores(model.eval(), full_windows(dataset, stride=2), batch_size=64)
    model_psnr, copy_psnr = np.mean(scores["psnr_model"]), np.mean(scores["psnr_copy_last"])
    assert model_psnr > copy_psnr + 0.5, (model_psnr, copy_psnr)
    assert np.mean(scores["joint_mae_model"]) < np.mean(scores["joint_mae_copy_last"])


def _run(args: list[str], timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "ROBOCOACH_DEVICE": "cpu"}
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def _module(name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", name, *args]


def _fraction_splitting(root) -> float:
    """A held-out fraction that leaves episodes on both sides of the split (it is keyed on what each
    episode is, its length included, so a three-episode store has no fixed good fraction)."""
    return next(
        f
        for f in (0.2, 0.4, 0.6, 0.8)
        if select_episodes([root], f, held_out=True) and select_episodes([root], f, held_out=False)
    )


def test_train_and_evaluate_clis(store, tmp_path):
    out = tmp_path / "run"
    fraction = str(_fraction_splitting(store.root))
    train = _module("robocoach_world.world.train", "--stores", str(store.root), "--out", str(out))
    train += ["--held-out-fraction", fraction, "--steps", "4", "--eval-every", "2", "--window.horizon", "3"]
    done = _run([*train, *TINY_FLAGS])
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["metrics"]["steps"] == 4 and (out / "curves.png").stat().st_size > 0
    model, meta = load_world(out / "checkpoint", device="cpu")
    assert meta["step"] == 4 and model.config.hidden_dim == 32
    again = _run([*train, *TINY_FLAGS])
    assert again.returncode != 0 and "exists" in again.stderr

    evaluate = _module("robocoach_world.world.evaluate", "--checkpoint", str(out / "checkpoint"))
    evaluate += ["--stores", str(store.root), "--out", str(out / "eval"), "--horizon", "3"]
    done = _run([*evaluate, "--strip-windows", "2"])
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "eval" / "metrics.json").read_text())
    assert len(report["per_horizon"]["psnr_model"]) == 3
    assert (out / "eval" / "strip.png").stat().st_size > 0
    assert "PSNR" in done.stdout


@pytest.mark.slow
def test_training_runs_under_torchrun_ddp(store, tmp_path):
    """Two CPU processes (gloo): the same script, unchanged, trains and writes one checkpoint."""
    out = tmp_path / "ddp"
    args = _module("torch.distributed.run", "--standalone", "--nproc_per_node=2")
    args += ["-m", "robocoach_world.world.train", "--stores", str(store.root), "--out", str(out)]
    args += ["--steps", "3", "--batch-size", "4", "--window.horizon", "2", "--held-out-fraction", "0"]
    done = _run([*args, *TINY_FLAGS])
    assert done.returncode == 0, done.stderr[-3000:]
    _, meta = load_world(out / "checkpoint", device="cpu")
    assert meta["step"] == 3
