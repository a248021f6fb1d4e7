"""Expert inference latency (batch 1 and 64) and the wall time of one adapter update, in one run, for
the default experts (hand space: joint targets by batched IK; keypoints from a 16x16 map; the
subtask's first frame remembered as keypoints, as executors pass it; table-plane inputs; LoRA on every
layer), the same with LoRA on the dense layers only (until session 37), looking at the first frame at
every call (session 31), without table-plane inputs, acting in joint space, without the first-frame
memory, and as they were until session 31 (8x8 map, no memory).

Latency is per `select_action` call (one policy step for 1 or 64 observations), measured with the
default ExpertConfig at 64x64 on random frames: the network cost does not depend on the values. The
proprio is each arm's home pose plus noise, so the IK does the work of an arm in a top-down pose.

    source env.sh && python bench/expert_inference.py                 # defaults: 200 calls, 100 update steps
    python bench/expert_inference.py --threads 2 --update-steps 300
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
import tyro

from robocoach_skills.action_contract import ACTION_DIM, pad
from robocoach_skills.constants import (
    KEY_ACTION_CHUNK,
    KEY_ACTION_MASK,
    KEY_ARGUMENTS,
    KEY_DONE,
    KEY_ROBOT_ID,
    KEY_SUBTASK_START,
    KEY_SUBTASK_START_KEYPOINTS,
    OBS_IMAGE,
    OBS_PROPRIO,
    ROBOTS,
    SUBTASK_ARGUMENTS,
)
from robocoach_skills.experts import ExpertConfig, ExpertLibrary
from robocoach_skills.experts.train import update_adapter
from robocoach_skills.sim.arms import get_arm

SKILLS = ("pick", "place", "push", "open_drawer", "close_drawer", "press_button")


@dataclass
class Args:
    calls: int = 200  # timed select_action calls per batch size
    warmup: int = 20  # untimed calls first
    update_steps: int = 100  # optimiser steps of the timed adapter update
    update_batch: int = 64  # samples per update step
    threads: int = 1  # torch intra-op threads
    seed: int = 0
    proprio_noise: float = 0.05  # uniform joint noise around the home pose [rad]


def random_batch(config: ExpertConfig, size: int, generator: torch.Generator, noise: float) -> dict:
    s, k = config.image_size, config.chunk_len
    robots = torch.randint(len(ROBOTS), (size,), generator=generator)
    homes = torch.stack(
        [torch.from_numpy(pad(r, np.append(get_arm(r).home, 1.0)).astype(np.float32)) for r in ROBOTS]
    )
    proprio = homes[robots] + noise * (2 * torch.rand(size, ACTION_DIM, generator=generator) - 1)
    return {
        OBS_IMAGE: torch.rand(size, 3, s, s, generator=generator),
        KEY_SUBTASK_START: torch.rand(size, 3, s, s, generator=generator),
        OBS_PROPRIO: proprio,
        KEY_ROBOT_ID: robots,
        KEY_ARGUMENTS: torch.randint(len(SUBTASK_ARGUMENTS), (size, 2), generator=generator),
        KEY_ACTION_CHUNK: proprio[:, None] + noise * torch.rand(size, k, ACTION_DIM, generator=generator),
        KEY_ACTION_MASK: torch.ones(size, k),
        KEY_DONE: torch.zeros(size),
    }


def latency_ms(library: ExpertLibrary, batch: dict, args: Args, remembered: bool) -> tuple[float, float]:
    """Mean and p99 of `select_action` [ms]; `remembered`: with the first frame's keypoints, computed once
    outside the timing (LibraryPolicy and imagination do so once per subtask)."""
    if remembered and library.config.argument_memory:
        keypoints = library.start_keypoints(batch[KEY_SUBTASK_START], "pick")
        batch = {k: v for k, v in batch.items() if k != KEY_SUBTASK_START} | {
            KEY_SUBTASK_START_KEYPOINTS: keypoints
        }
    for _ in range(args.warmup):
        library.select_action(batch, "pick")
    times = []
    for _ in range(args.calls):
        start = time.perf_counter()
        library.select_action(batch, "pick")
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.mean(times)), float(np.percentile(times, 99))


def main(args: Args) -> None:
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(args.seed)
    sizes = (1, 64)
    batches = {size: random_batch(ExpertConfig(), size, generator, args.proprio_noise) for size in sizes}
    updates = [
        random_batch(ExpertConfig(), args.update_batch, generator, args.proprio_noise) for _ in range(4)
    ]
    print(
        f"expert inference, 64x64 frames, {args.threads} torch thread(s), {args.calls} calls per batch size"
    )
    no_table = ExpertConfig(argument_table=False)
    variants = {  # name: (config, first frame remembered)
        "default": (ExpertConfig(), True),
        "LoRA on fuse and trunk only (until session 37)": (ExpertConfig(lora_layers=("fuse", "trunk")), True),
        "first frame at every call (session 31)": (no_table, False),
        "no table inputs": (no_table, True),
        "joint space": (ExpertConfig(action_space="joint"), True),
        "no memory": (ExpertConfig(argument_memory=False), True),
        "before session 31": (
            ExpertConfig(keypoint_stride=2, argument_memory=False, argument_table=False),
            True,
        ),
    }
    results = {}
    for name, (config, remembered) in variants.items():
        library = ExpertLibrary(config, skills=SKILLS)
        print(f" {name}")
        for size in sizes:
            mean, p99 = latency_ms(library, batches[size], args, remembered)
            results[name, size] = mean
            per_obs = mean / size
            print(
                f"  batch {size:3d}: mean {mean:7.2f} ms  p99 {p99:7.2f} ms  ({per_obs:6.3f} ms/observation)"
            )
        start = time.perf_counter()
        update_adapter(library, "pick", updates, args.update_steps, progress=False)
        seconds = results[name, "update"] = time.perf_counter() - start
        print(f"  adapter update: {args.update_steps} steps x batch {args.update_batch} in {seconds:.1f} s")
    for name in list(variants)[1:]:
        for key in (*sizes, "update"):
            what = f"batch {key}" if key != "update" else "adapter update"
            print(f" default / {name}, {what}: {results['default', key] / results[name, key]:.2f}x")


if __name__ == "__main__":
    main(tyro.cli(Args))
