"""The coach's report plots, as PNGs (matplotlib Figure API: no pyplot state, no display needed).

plot_success_per_round({"pick_place_bin": [0.1, 0.4, 0.6], ...}, out / "success_per_round.png")
plot_allocation_per_round([{"pick(red_cube)": 10, ...}, ...], out / "allocation_per_round.png")
stats = plot_imagined_vs_deployed(imagined, deployed, out / "imagined_vs_deployed.png")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from robocoach_skills.measures import mmrv, pearson, spearman


@dataclass(frozen=True)
class PlotConfig:
    dpi: int = 120
    width: float = 7.0  # inches
    height: float = 4.5  # inches
    max_labels: int = 24  # scatter points named beside them; with more, names only clutter the plot

    def __post_init__(self) -> None:
        if self.dpi < 1 or self.width <= 0 or self.height <= 0:
            raise ValueError(f"PlotConfig needs positive sizes, got {self}")


def plot_success_per_round(
    success: Mapping[str, Sequence[float]], path: Path, config: PlotConfig | None = None
) -> Path:
    """One line per composition (success rate after each round) and their mean, bold."""
    config = config or PlotConfig()
    if not success or len({len(v) for v in success.values()}) != 1:
        raise ValueError("need one equally long success series per composition")
    fig = Figure(figsize=(config.width, config.height))
    ax = fig.add_subplot()
    for name, series in success.items():
        ax.plot(range(len(series)), series, marker="o", alpha=0.5, label=name)
    mean = np.mean([list(v) for v in success.values()], axis=0)
    ax.plot(range(len(mean)), mean, color="black", linewidth=2.5, marker="s", label="mean")
    ax.set(xlabel="round", ylabel="success rate", ylim=(-0.02, 1.02), title="success per round")
    ax.set_xticks(range(len(mean)))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path, config)


def plot_allocation_per_round(
    allocations: Sequence[Mapping[str, int]], path: Path, config: PlotConfig | None = None
) -> Path:
    """Stacked bars: demos requested per subtask (pair) in each round."""
    config = config or PlotConfig()
    labels = list(dict.fromkeys(k for a in allocations for k in a))
    fig = Figure(figsize=(config.width, config.height))
    ax = fig.add_subplot()
    bottom = np.zeros(len(allocations))
    for label in labels:
        counts = np.array([a.get(label, 0) for a in allocations], dtype=float)
        ax.bar(range(len(allocations)), counts, bottom=bottom, label=label)
        bottom += counts
    ax.set(xlabel="round", ylabel="demos requested", title="demo allocation per subtask")
    ax.set_xticks(range(len(allocations)))
    if labels:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path, config)


def plot_imagined_vs_deployed(
    imagined: Mapping[str, float],
    deployed: Mapping[str, float],
    path: Path,
    config: PlotConfig | None = None,
    measure: str = "success",
) -> dict:
    """Scatter over the task-policy pairs both sides have; returns the measures and the path.

    Keys are task-policy pair names (e.g. "franka/pick_place_bin/round2"). Spearman and Pearson are
    nan when either side is constant (measures.py), MMRV is 0 for a perfectly ordered pair set.
    """
    config = config or PlotConfig()
    names = [k for k in imagined if k in deployed]
    if len(names) < 2:
        raise ValueError(f"need >= 2 task-policy pairs with both imagined and deployed success, got {names}")
    x = [imagined[k] for k in names]
    y = [deployed[k] for k in names]
    stats = {
        "spearman": spearman(x, y),
        "pearson": pearson(x, y),
        "mmrv": mmrv(real=y, sim=x),
        "pairs": len(names),
    }
    fig = Figure(figsize=(config.height + 0.5, config.height))
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], color="0.7", linestyle="--", linewidth=1)
    at: dict[tuple[float, float], list[str]] = {}  # pairs on the same point share one marker and label
    for name, xi, yi in zip(names, x, y, strict=True):
        at.setdefault((xi, yi), []).append(name)
    points = np.array(list(at), dtype=float)
    counts = np.array([len(here) for here in at.values()])
    ax.scatter(points[:, 0], points[:, 1], s=20 * np.sqrt(counts), color="tab:blue", alpha=0.7)
    for point, here in at.items():
        if len(at) <= config.max_labels or len(here) > 1:
            label = here[0] if len(here) == 1 else f"{len(here)} pairs"
            ax.annotate(label, point, fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set(xlim=(-0.02, 1.02), ylim=(-0.02, 1.02), xlabel=f"imagined {measure}", ylabel=f"deployed {measure}")
    ax.set_title(
        f"Spearman rho={stats['spearman']:.3f}  Pearson r={stats['pearson']:.3f}\n"
        f"MMRV={stats['mmrv']:.3f}  ({len(names)} task-policy pairs)",
        fontsize=9,
    )
    return {**stats, "path": _save(fig, path, config)}


def _save(fig: Figure, path: Path, config: PlotConfig) -> Path:
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=config.dpi)
    return path
