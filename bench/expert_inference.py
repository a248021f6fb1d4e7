"""Expert inference latency (batch 1 and 64) and the wall time of one adapter update, in one run.

Latency is per `select_action` call (one policy step for 1 or 64 observations), measured with the
default ExpertConfig at 64x64 on random inputs: the network cost does not depend on the values.

    source env.sh && python bench/expert_inference.py                 # defaults: 200 calls, 100 update steps
    python bench/expert_inference.py --threads 2 --update-steps 300
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
import tyro

from robocoach_skills.action_contract import ACTION_DIM
from robocoach_skills.constants import (
    KEY_ACTION_CHUNK,
    KEY_ACTION_MASK,
    KEY_ARGUMENTS,
    KEY_DONE,
    KEY_ROBOT_ID,
    OBS_IMAGE,
    OBS_PROPRIO,
    ROBOTS,
    SUBTASK_ARGUMENTS,
)
from robocoach_skills.experts import ExpertConfig, ExpertLibrary
from robocoach_skills.experts.train import update_adapter

SKILLS = ("pick", "place", "push", "open_drawer", "close_drawer", "press_button")


@dataclass
class Args:
    calls: int = 200  # timed select_action calls per batch size
    warmup: int = 20  # untimed calls first
    update_steps: int = 100  # optimiser steps of the timed adapter update
    update_batch: int = 64  # samples per update step
    threads: int = 1  # torch intra-op threads
    seed: int = 0


def random_batch(config: ExpertConfig, size: int, generator: torch.Generator) -> dict:
    s, k = config.image_size, config.chunk_len
    return {
        OBS_IMAGE: torch.rand(size, 3, s, s, generator=generator),
        OBS_PROPRIO: torch.rand(size, ACTION_DIM, generator=generator),
        KEY_ROBOT_ID: torch.randint(len(ROBOTS), (size,), generator=generator),
        KEY_ARGUMENTS: torch.randint(len(SUBTASK_ARGUMENTS), (size, 2), generator=generator),
        KEY_ACTION_CHUNK: torch.rand(size, k, ACTION_DIM, generator=generator),
        KEY_ACTION_MASK: torch.ones(size, k),
        KEY_DONE: torch.zeros(size),
    }


def latency_ms(library: ExpertLibrary, batch: dict, args: Args) -> tuple[float, float]:
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
    config = ExpertConfig()
    library = ExpertLibrary(config, skills=SKILLS)
    print(f"expert inference, {config.image_size}x{config.image_size} frames, {args.threads} torch thread(s)")
    results = {}
    for size in (1, 64):
        mean, p99 = latency_ms(library, random_batch(config, size, generator), args)
        results[size] = mean
        per_obs = mean / size
        print(
            f"  batch {size:3d}: mean {mean:7.2f} ms  p99 {p99:7.2f} ms  ({per_obs:6.3f} ms per observation)"
        )
    print(f"  batching 64 observations costs {results[64] / results[1]:.1f}x one observation")
    batches = [random_batch(config, args.update_batch, generator) for _ in range(4)]
    start = time.perf_counter()
    update_adapter(library, "pick", batches, args.update_steps, progress=False)
    seconds = time.perf_counter() - start
    print(f"  adapter update: {args.update_steps} steps x batch {args.update_batch} in {seconds:.1f} s")


if __name__ == "__main__":
    main(tyro.cli(Args))
