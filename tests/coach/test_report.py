"""Operator scorecard and coach plots: the numbers they show and the files they write."""

from __future__ import annotations

import json

import numpy as np
import pytest
from coach_helpers import TASK_A, TASK_B, trials

from robocoach_world.coach.allocation import allocate
from robocoach_world.coach.diagnosis import diagnose
from robocoach_world.coach.plots import (
    plot_allocation_per_round,
    plot_imagined_vs_deployed,
    plot_success_per_round,
)
from robocoach_world.coach.scorecard import (
    FailureClip,
    ScorecardConfig,
    pick_clips,
    scorecard,
    scorecard_markdown,
    write_clips,
)

PNG = b"\x89PNG\r\n\x1a\n"


def _diagnosis():
    records = trials(TASK_A, [1, 1, 0, -1], states=[(3, 103), (3, 103), (5, 105), (6, 106)])
    return diagnose(records + trials(TASK_B, [-1, 1], states=[(0, 200), (1, 201)]), [TASK_A, TASK_B])


def _clip(seed: int, frames: int = 12, failed: int = 1) -> FailureClip:
    """A clip of a task_a trial from initial-state `seed` that first failed at subtask `failed`."""
    record = trials(TASK_A, [failed], states=[(0, seed)])[0]
    rng = np.random.default_rng(seed)
    return FailureClip.of_trial(
        TASK_A,
        record,
        frames=rng.integers(0, 256, (frames, 16, 16, 3), dtype=np.uint8),
        trace=np.linspace(0, 0.7, frames),
        active=(np.arange(frames) >= frames // 2).astype(int),
    )


def test_scorecard_without_clips():
    diagnosis = _diagnosis()
    markdown, data = scorecard(diagnosis, allocate(diagnosis, 10))
    assert (
        "| franka:place(red_cube, bin) | place | 40% | 5 | 0.500 "
        "| task_a seed 103 (2x), task_b seed 201 (1x) | 10 |" in markdown
    )
    assert "| franka:pick(red_cube) | pick | 75% | 4 (too few) | 0.125 |" in markdown
    assert (
        "| franka | task_a | pick(red_cube) -> pick v0; place(red_cube, bin) -> place v0 | 25% [" in markdown
    )
    assert data["clips"] == [] and data["pairs"][0]["requested_demos"] == 10
    json.dumps(data)  # JSON-able as is (raises otherwise)


def test_the_first_clips_of_the_top_pairs_are_written_and_linked(tmp_path):
    diagnosis = _diagnosis()  # place: mass 0.5, pick: 0.125, press_button(red_button): never first
    clips = [_clip(1), _clip(2, failed=0), _clip(3, frames=3), _clip(4)]
    config = ScorecardConfig(clips_per_pair=2, top_pairs=1)
    assert [c.seed for c in pick_clips(clips, config)] == [1, 3, 2]  # every pair's first two, grouped
    shown = pick_clips(clips, config, diagnosis)
    assert [c.seed for c in shown] == [1, 3]  # the top pair (place) only
    entries = write_clips(shown, tmp_path, config)
    markdown, data = scorecard(diagnosis, None, entries)
    assert data["clips"] == entries and [c["seed"] for c in entries] == [1, 3]
    for clip in entries:
        assert (tmp_path / clip["path"]).read_bytes()[:8] == PNG
        assert f"]({clip['path']})" in markdown
    assert "route: pick(red_cube) -> pick v0; place(red_cube, bin) -> place v0" in markdown
    elsewhere = scorecard_markdown(data, link_base="coach/franka/round_000/")
    assert f"](coach/franka/round_000/{entries[0]['path']})" in elsewhere
    json.dumps(data)


def test_clips_and_their_config_are_checked():
    with pytest.raises(ValueError, match="trace"):
        FailureClip(_clip(1).pair, "task_a", 0, np.zeros((4, 8, 8, 3), np.uint8), np.zeros(3))
    success = trials(TASK_A, [-1])[0]
    with pytest.raises(ValueError, match="succeeded"):
        FailureClip.of_trial(TASK_A, success, np.zeros((1, 8, 8, 3), np.uint8), np.zeros(1))
    assert pick_clips([_clip(1)], ScorecardConfig(clips_per_pair=0)) == []  # 0: no clips
    with pytest.raises(ValueError, match="top_pairs"):
        ScorecardConfig(top_pairs=0)


def test_plots_write_pngs(tmp_path):
    success = {"task_a": [0.1, 0.4, 0.6], "task_b": [0.3, 0.2, 0.8]}
    assert plot_success_per_round(success, tmp_path / "s.png").read_bytes()[:8] == PNG
    rounds = [{"place(red_cube, bin)": 5, "pick(red_cube)": 5}, {"place(red_cube, bin)": 10}, {}]
    assert plot_allocation_per_round(rounds, tmp_path / "a.png").read_bytes()[:8] == PNG
    with pytest.raises(ValueError, match="equally long"):
        plot_success_per_round({"a": [0.1], "b": [0.1, 0.2]}, tmp_path / "x.png")


def test_imagined_vs_deployed_measures_by_hand(tmp_path):
    imagined = {"a": 0.1, "b": 0.5, "c": 0.9, "only_imagined": 0.3}
    deployed = {"a": 0.2, "b": 0.4, "c": 0.8}
    stats = plot_imagined_vs_deployed(imagined, deployed, tmp_path / "iv.png")
    assert stats["pairs"] == 3 and stats["spearman"] == pytest.approx(1.0) and stats["mmrv"] == 0.0
    assert stats["pearson"] == pytest.approx(np.corrcoef([0.1, 0.5, 0.9], [0.2, 0.4, 0.8])[0, 1])
    assert stats["path"].read_bytes()[:8] == PNG
    # one pair ranked the wrong way round: b and c swap. MMRV: rows b and c each see |0.4 - 0.8| = 0.4.
    swapped = plot_imagined_vs_deployed({"a": 0.1, "b": 0.9, "c": 0.5}, deployed, tmp_path / "sw.png")
    assert swapped["spearman"] == pytest.approx(0.5) and swapped["mmrv"] == pytest.approx(0.8 / 3)
    with pytest.raises(ValueError, match=">= 2"):
        plot_imagined_vs_deployed({"a": 0.1}, deployed, tmp_path / "one.png")
