"""The per-skill calibration of imagined outcomes, worked out by hand (no simulation, no models)."""

from __future__ import annotations

import json

import pytest
from scipy import stats

from robocoach_world.calibration import ImaginationCalibration
from robocoach_world.fidelity import (
    calibrated,
    diagnosis_agreement,
    diagnosis_markdown,
    fidelity_markdown,
    fidelity_measures,
)

# pick: deployed 2 of 10 reached, imagined 1 of 10; place: the same on both sides
PER_SKILL = {
    "franka pick": {"deployed": [2, 10], "imagined": [1, 10]},
    "franka place": {"deployed": [3, 4], "imagined": [3, 4]},
}


def test_the_map_scales_successes_where_imagination_is_optimistic_and_failures_where_pessimistic():
    calibration = ImaginationCalibration(PER_SKILL, pseudo_trials=2.0)
    # pick: deployed (2 + 1) / 12 = 1/4, imagined (1 + 1) / 12 = 1/6: pessimistic,
    # failures scale by (3/4) / (5/6) = 0.9
    assert calibration.anchors("franka", "pick") == pytest.approx((1 / 6, 1 / 4))
    assert calibration.adjust("franka", "pick", 1 / 6) == pytest.approx(1 / 4)
    assert calibration.adjust("franka", "pick", 0.5) == pytest.approx(1 - 0.5 * 0.9)
    optimistic = ImaginationCalibration({"franka push": {"deployed": [1, 10], "imagined": [8, 10]}})
    # deployed 2/12, imagined 9/12: successes scale by (1/6) / (3/4)
    assert optimistic.adjust("franka", "push", 0.75) == pytest.approx(1 / 6)
    assert optimistic.adjust("franka", "push", 1.0) == pytest.approx(2 / 9)
    assert calibration.adjust("franka", "place", 0.3) == pytest.approx(0.3)  # both sides agree: unchanged
    assert calibration.adjust("franka", "push", 0.3) == 0.3  # never calibrated: kept as imagined
    assert calibration.adjust("piper", "pick", 0.3) == 0.3
    unreached = ImaginationCalibration({"franka push": {"deployed": [0, 0], "imagined": [3, 5]}})
    assert unreached.anchors("franka", "push") is None  # never reached deployed: no direction to correct


def test_a_saturated_skill_maps_a_pairs_full_rate_near_the_calibrations_own():
    drawer = ImaginationCalibration({"franka open_drawer": {"deployed": [13, 40], "imagined": [80, 80]}})
    (q_imagined, q_deployed) = drawer.anchors("franka", "open_drawer")
    assert drawer.adjust("franka", "open_drawer", q_imagined) == pytest.approx(q_deployed)  # 14/42
    # a pair whose 20 imagined openings all succeed: (20 + 2 * 81/82) / 22, scaled by (14/42) / (81/82)
    assert drawer.success("franka", ["open_drawer"], [-1] * 20) == pytest.approx(
        (20 + 2 * 81 / 82) / 22 * (14 / 42) / (81 / 82)
    )


def test_a_pair_is_calibrated_subtask_by_subtask_and_multiplied():
    calibration = ImaginationCalibration(PER_SKILL, pseudo_trials=2.0)
    failed = [-1, 0, 1, 1]  # pick: reached 4, completed 3; place: reached 3, completed 1
    # pick: (3 + 2 * 1/6) / 6 = 5/9 imagined, failures 4/9 * 0.9 = 0.4 -> 0.6
    # place: prior (3 + 1) / 6 = 2/3, (1 + 2 * 2/3) / 5 = 7/15, unchanged
    pick, place = 0.6, 7 / 15
    assert calibration.subtask_rates("franka", ["pick", "place"], failed) == pytest.approx([pick, place])
    assert calibration.success("franka", ["pick", "place"], failed) == pytest.approx(pick * place)
    assert calibration.completion("franka", ["pick", "place"], failed) == pytest.approx(
        (pick + pick * place) / 2
    )
    # first timeouts: at pick 1 - pick, at place pick * (1 - place); with the success they cover every trial
    timeouts = calibration.first_timeouts("franka", ["pick", "place"], failed)
    assert timeouts == pytest.approx([1 - pick, pick * (1 - place)])
    assert sum(timeouts) + pick * place == pytest.approx(1.0)


def test_where_both_sides_agree_the_calibrated_success_is_the_imagined_one():
    agreeing = {
        "franka pick": {"deployed": [5, 9], "imagined": [5, 9]},
        "franka place": {"deployed": [1, 3], "imagined": [1, 3]},
    }
    calibration = ImaginationCalibration(agreeing, pseudo_trials=1e-9)
    failed = [-1, -1, 0, 1]  # 2 of 4 succeed: pick 3/4, place 2/3 where reached
    assert calibration.success("franka", ["pick", "place"], failed) == pytest.approx(0.5)


def test_a_calibration_survives_a_round_trip_and_a_bad_file_is_refused_by_name(tmp_path):
    calibration = ImaginationCalibration(PER_SKILL, 3.0, {"rollouts": 14})
    calibration.save(tmp_path / "c.json")
    loaded = ImaginationCalibration.load(tmp_path / "c.json")
    assert loaded.to_dict() == calibration.to_dict()
    assert json.loads((tmp_path / "c.json").read_text())["anchors"]["franka place"] == pytest.approx(
        [4.5 / 7] * 2
    )
    (tmp_path / "bad.json").write_text('{"per_skill": {"franka pick": {"deployed": [3, 2]}}}')
    with pytest.raises(ValueError, match=r"bad\.json"):
        ImaginationCalibration.load(tmp_path / "bad.json")
    (tmp_path / "cut.json").write_text('{"per_skill": ')
    with pytest.raises(ValueError, match=r"cut\.json"):
        ImaginationCalibration.load(tmp_path / "cut.json")
    with pytest.raises(ValueError, match="completed, reached"):
        ImaginationCalibration({"franka pick": {"deployed": [1, 2]}})


def _row(composition: str, deployed: float, imagined_first_failed: list[int], robot: str = "franka") -> dict:
    return {
        "robot": robot, "composition": composition, "policy": "p", "deployed_success": deployed,
        "deployed_completion": deployed, "deployed_first_failed": [],
        "imagined_first_failed": imagined_first_failed, "imagined_success": None, "imagined_completion": None,
        "paired_deployed_first_failed": list(imagined_first_failed),
    }  # fmt: skip


def test_rows_gain_calibrated_measures_only_for_arms_with_a_calibration(tmp_path):
    calibration = ImaginationCalibration(PER_SKILL, pseudo_trials=2.0)
    rows = [_row("pick_place_bin", d, f) for d, f in ((0.1, [0, 0]), (0.3, [-1, 1]), (0.6, [-1, -1]))]
    rows.append(_row("pick_place_bin", 0.2, [], robot="franka"))  # no valid imagined trial
    rows.append(_row("pick_place_bin", 0.5, [-1], robot="piper"))  # an arm without a calibration
    out = calibrated(rows, {"franka": calibration})
    assert [r["calibrated_success"] for r in out[:3]] == pytest.approx(
        [calibration.success("franka", ["pick", "place"], r["imagined_first_failed"]) for r in rows[:3]]
    )
    assert out[3]["calibrated_success"] is None and "calibrated_success" not in out[4]
    measures = fidelity_measures(out, tmp_path, key=lambda r: f"{r['robot']}{r['deployed_success']}")
    stats = measures["fidelity"]["calibrated_success"]
    assert stats["pairs"] == 3 and stats["spearman"] == pytest.approx(1.0)  # ordered as deployed
    assert "Imagined vs deployed calibrated success over 3" in "\n".join(fidelity_markdown(measures))
    assert (tmp_path / "imagined_vs_deployed_calibrated_success.png").exists()


def _checkpoint_row(composition, deployed, imagined, policy="start", held_out=False):
    return {
        "robot": "franka", "policy": policy, "composition": composition, "held_out": held_out,
        "deployed_first_failed": deployed, "imagined_first_failed": imagined,
    }  # fmt: skip


def test_diagnosis_agreement_ranks_imagined_masses_against_deployed_ones_per_checkpoint():
    rows = [
        _checkpoint_row("pick_place_bin", deployed=[0, 0, 1, -1], imagined=[1, 1, -1, -1]),
        _checkpoint_row("press_push", deployed=[1, 1, -1, -1], imagined=[1, -1, -1, -1]),
        _checkpoint_row(
            "push_then_press", deployed=[0, 0], imagined=[-1, -1], held_out=True
        ),  # not coached: left out
        _checkpoint_row("press_push", deployed=[-1], imagined=[1], policy="robocoach/seed0@150"),
    ]
    start, coached = diagnosis_agreement(rows, {})
    # masses over the two tasks, deployed: pick (2/4)/2, place (1/4)/2, press 0, push (2/4)/2;
    # imagined: pick 0, place (2/4)/2, press 0, push (1/4)/2
    deployed, imagined = [0.25, 0.125, 0.0, 0.25], [0.0, 0.25, 0.0, 0.125]
    assert start["pairs"] == 4 and "calibrated" not in start
    assert start["raw"]["spearman"] == pytest.approx(stats.spearmanr(imagined, deployed).statistic)
    assert start["deployed_top"] == ["franka:pick(red_cube)", "franka:push(green_cube, pad)"]  # tie: by name
    assert start["raw"]["top"] == ["franka:place(red_cube, bin)", "franka:push(green_cube, pad)"]
    assert start["raw"]["top_shared"] == 1
    # deployed, the one press_push trial succeeds: every pair weighs 0, no rank to correlate
    assert coached["policy"] == "robocoach/seed0@150" and coached["raw"]["spearman"] is None
    agreeing = {f"franka {s}": {"deployed": [1, 2], "imagined": [1, 2]} for s in ("pick", "place", "push")}
    calibration = ImaginationCalibration(agreeing, pseudo_trials=1e-9)
    start_calibrated = diagnosis_agreement(rows, {"franka": calibration})[0]
    assert start_calibrated["calibrated"]["spearman"] == pytest.approx(start["raw"]["spearman"])
    lines = "\n".join(diagnosis_markdown([start_calibrated, coached]))
    assert "| franka | start | 4 |" in lines and "| - |" in lines
    assert f"raw {start['raw']['spearman']:.3f} over 1 checkpoints" in lines
