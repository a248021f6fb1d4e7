"""Stage 1 of the main job: record the bootstrap subtask demos on every arm, and show them."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from matplotlib.figure import Figure

from robocoach_skills.bootstrap import BootstrapConfig, collect_bootstrap_demos
from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_skills.sim.scene import SceneConfig


def run(config, results: dict) -> dict:
    """Record demos into <output>/episodes; returns the per-robot summaries and a montage plot."""
    size = config.image_size
    store = EpisodeStore.create(
        config.output / "episodes",
        StoreInfo(fps=SceneConfig().policy_hz, image_size=(size, size)),
        exist_ok=True,
    )
    bootstrap = BootstrapConfig(
        demos_per_skill=config.profile.demos_per_skill,
        image_size=size,
        seed=config.seed,
    )
    summaries = {robot: collect_bootstrap_demos(robot, store, bootstrap) for robot in config.robots}
    montage = _montage(store, summaries, config.output / "bootstrap_demos.png")
    rows = ["| robot | skill | accepted | discarded takes | mean length [steps] |", "|---|---|---|---|---|"]
    for robot, per_skill in summaries.items():
        rows += [
            f"| {robot} | {s.skill} | {s.accepted} | {s.discarded} | {s.mean_length:.0f} |"
            for s in per_skill.values()
        ]
    markdown = "\n".join(
        [
            f"Scripted-operator subtask demos, {bootstrap.demos_per_skill} per skill and arm, stored in "
            f"`{store.root}`.",
            "",
            *rows,
            "",
            f"![first and last frame of one demo per skill]({montage.name})",
        ]
    )
    return {
        "store": str(store.root),
        "demos_per_skill": bootstrap.demos_per_skill,
        "summaries": {robot: {k: asdict(v) for k, v in s.items()} for robot, s in summaries.items()},
        "plots": [montage.name],
        "markdown": markdown,
    }


def _montage(store: EpisodeStore, summaries: dict, path: Path) -> Path:
    """First and last frame of the first accepted demo of each skill, one row per arm."""
    columns = [
        (robot, s) for robot, per_skill in summaries.items() for s in per_skill.values() if s.episode_ids
    ]
    width = max(len(columns), 1)
    fig = Figure(figsize=(1.6 * width, 3.6))  # no pyplot: no global state, no GUI backend
    axes = fig.subplots(2, width, squeeze=False)
    for col, (robot, summary) in enumerate(columns):
        episode = store.get(summary.episode_ids[0])
        for row, (frame, label) in enumerate(((0, "start"), (-1, "end"))):
            ax = axes[row][col]
            ax.imshow(episode.images[frame])
            ax.set_xticks([])
            ax.set_yticks([])
            if row == 0:
                ax.set_title(f"{robot}\n{summary.skill}", fontsize=7)
            if col == 0:
                ax.set_ylabel(label, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path
