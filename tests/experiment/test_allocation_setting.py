"""`robocoach experiment --allocation`, `--min-gain` and `--no-calibrated-targets`: one setting for the
targeted methods."""

from __future__ import annotations

import json

import pytest

from robocoach_bringup.experiment import ExperimentConfig
from robocoach_world.calibration import CALIBRATION_FILE, ImaginationCalibration
from robocoach_world.coach.allocation import AllocationConfig
from robocoach_world.experiment.methods import METHODS, REFERENCE, ROUND_ROBIN, TARGETED, PolicyKind
from robocoach_world.experiment.runner import (
    SETTINGS_FILE,
    RunSettings,
    _claim_settings,
    allocation_config,
    target_calibration,
)

REFERENCE_METHOD = METHODS[REFERENCE]


@pytest.fixture
def inputs(tmp_path):
    """A run folder with the four inputs `robocoach experiment` asks for (their contents unread here)."""
    for name in ("episodes", "experts", "world", "judge"):
        (tmp_path / name).mkdir()
    return tmp_path


def test_the_allocation_option_reaches_every_targeted_method_and_no_other(inputs):
    assert ExperimentConfig(run=inputs).settings().targeted_allocation == "top_m"  # the paper's rule
    settings = ExperimentConfig(run=inputs, allocation="proportional").settings()
    strategies = {m.name: m.strategy(settings.targeted_allocation) for m in METHODS.values()}
    targeted = {m.name for m in METHODS.values() if m.allocation == TARGETED}
    assert targeted == {"shared_targeted", "modular_random", "robocoach", "oracle"}
    assert {strategies[n] for n in targeted} == {"proportional"}
    assert strategies["shared_uniform"] == strategies["modular_uniform"] == "uniform"
    assert strategies["end_to_end"] == ROUND_ROBIN


def test_the_min_gain_option_reaches_the_methods_with_rollouts_behind_their_records(inputs):
    assert ExperimentConfig(run=inputs).settings().targeted_min_gain == AllocationConfig.min_gain == 0.05
    assert (
        ExperimentConfig(run=inputs, min_gain=None).settings().targeted_min_gain is None
    )  # the paper's rule
    settings = ExperimentConfig(run=inputs, min_gain=0.1).settings()
    coached = {n: m for n, m in METHODS.items() if m.policy != PolicyKind.END_TO_END}  # (f) has no coach
    gains = {name: allocation_config(m, settings).min_gain for name, m in coached.items()}
    assert {n for n, g in gains.items() if g == 0.1} == {"shared_targeted", "robocoach", "oracle"}
    assert gains["modular_random"] is None and gains["modular_uniform"] is None  # blind: nothing to judge
    with pytest.raises(ValueError, match=r"min_gain must be None or in \[0, 1\], got 1.5"):
        ExperimentConfig(run=inputs, min_gain=1.5)


def test_a_run_folder_from_before_the_min_gain_setting_ran_the_paper_rule(tmp_path):
    run_dir = tmp_path / "seed0"
    _claim_settings(run_dir, RunSettings(), REFERENCE_METHOD)
    settings = json.loads((run_dir / SETTINGS_FILE).read_text())
    del settings["targeted_min_gain"]
    (run_dir / SETTINGS_FILE).write_text(json.dumps(settings))
    _claim_settings(run_dir, RunSettings(targeted_min_gain=None), REFERENCE_METHOD)  # read back: off then
    with pytest.raises(ValueError, match=r"targeted_min_gain.*\(None, 0.05\)"):  # not as the new default
        _claim_settings(run_dir, RunSettings(), REFERENCE_METHOD)


def test_the_world_model_methods_diagnose_with_the_inputs_calibration_unless_told_not_to(inputs):
    settings = ExperimentConfig(run=inputs).settings()
    assert settings.calibrated_targets
    assert all(target_calibration(inputs, m, settings) is None for m in METHODS.values())  # none to use
    ImaginationCalibration({"franka pick": {"deployed": [1, 4], "imagined": [3, 4]}}).save(
        inputs / CALIBRATION_FILE
    )
    used = {n for n, m in METHODS.items() if target_calibration(inputs, m, settings) is not None}
    assert used == {"shared_targeted", "robocoach"}  # the oracle's targets are deployed, not imagined
    assert target_calibration(inputs, REFERENCE_METHOD, settings).anchors("franka", "pick") == (
        pytest.approx(4 / 6),
        pytest.approx(2 / 6),
    )
    raw = ExperimentConfig(run=inputs, calibrated_targets=False).settings()
    assert not raw.calibrated_targets and target_calibration(inputs, REFERENCE_METHOD, raw) is None
    (inputs / CALIBRATION_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=CALIBRATION_FILE):
        target_calibration(inputs, REFERENCE_METHOD, settings)


def test_a_run_folder_from_before_calibrated_targets_ran_raw_masses(tmp_path):
    _claim_settings(tmp_path, RunSettings(), REFERENCE_METHOD)
    settings = json.loads((tmp_path / SETTINGS_FILE).read_text())
    del settings["calibrated_targets"]
    (tmp_path / SETTINGS_FILE).write_text(json.dumps(settings))
    _claim_settings(tmp_path, RunSettings(calibrated_targets=False), REFERENCE_METHOD)
    with pytest.raises(ValueError, match=r"calibrated_targets.*\(False, True\)"):
        _claim_settings(tmp_path, RunSettings(), REFERENCE_METHOD)


def test_an_unknown_strategy_is_refused_when_configured(inputs):
    with pytest.raises(ValueError, match=r"unknown allocation strategy 'biggest'.*proportional"):
        ExperimentConfig(run=inputs, allocation="biggest")


def test_a_run_folder_is_never_read_back_under_other_settings(tmp_path):
    run_dir = tmp_path / "runs" / "robocoach" / "franka" / "seed0"
    _claim_settings(run_dir, RunSettings(), REFERENCE_METHOD)
    _claim_settings(run_dir, RunSettings(), REFERENCE_METHOD)  # the same settings: resumes
    with pytest.raises(ValueError, match=r"targeted_allocation.*(.top_m., .proportional.).*another --output"):
        _claim_settings(run_dir, RunSettings(targeted_allocation="proportional"), REFERENCE_METHOD)


@pytest.mark.parametrize(
    ("method", "reads"),
    [
        ("modular_uniform", set()),
        ("end_to_end", set()),
        ("modular_random", {"targeted_allocation"}),
        ("shared_targeted", {"targeted_allocation", "targeted_min_gain", "calibrated_targets"}),
        ("robocoach", {"targeted_allocation", "targeted_min_gain", "calibrated_targets"}),
        ("oracle", {"targeted_allocation", "targeted_min_gain"}),
    ],
)
def test_a_run_is_read_back_under_settings_its_method_does_not_read(tmp_path, method, reads):
    _claim_settings(tmp_path, RunSettings(), METHODS[method])
    changes = (
        {"targeted_allocation": "proportional"},
        {"targeted_min_gain": 0.1},
        {"calibrated_targets": False},
    )
    for changed in changes:
        if set(changed) & reads:
            with pytest.raises(ValueError, match=next(iter(changed))):
                _claim_settings(tmp_path, RunSettings(**changed), METHODS[method])
        else:  # e.g. uniform acquisition's runs beside targeted runs of another allocation, in one report
            _claim_settings(tmp_path, RunSettings(**changed), METHODS[method])
    with pytest.raises(ValueError, match="eval_rollouts"):  # every method reads the rest
        _claim_settings(tmp_path, RunSettings(eval_rollouts=3), METHODS[method])
