"""Test helper process: add episodes to an existing store, printing "ready" and then each new id.

    python writer_loop.py STORE_ROOT [--count N] [--steps T] [--size S] [--seed K]

With --count 0 (the default) it writes until killed: the crash-safety test SIGKILLs it mid-write.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from episode_factory import make_episode

from robocoach_skills.data.store import EpisodeStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("root", type=Path)
    parser.add_argument("--count", type=int, default=0, help="episodes to write; 0 = until killed")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    store = EpisodeStore(args.root)
    print("ready", flush=True)
    written = 0
    while args.count == 0 or written < args.count:
        episode = make_episode(steps=args.steps, size=args.size, seed=args.seed + written)
        print(store.add(episode), flush=True)
        written += 1


if __name__ == "__main__":
    main()
