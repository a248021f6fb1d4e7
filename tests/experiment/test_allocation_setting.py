"""`robocoach experiment --allocation`: one strategy for every targeted method, checked before any run."""

from __future__ import annotations

import pytest

from robocoach_bringup.experiment import ExperimentConfig
from robocoach_world.experiment.methods import METHODS, ROUND_ROBIN, TARGETED
from robocoach_world.experiment.runner import RunSettings, _claim_settings


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


def test_an_unknown_strategy_is_refused_when_configured(inputs):
    with pytest.raises(ValueError, match=r"unknown allocation strategy 'biggest'.*proportional"):
        ExperimentConfig(run=inputs, allocation="biggest")


def test_a_run_folder_is_never_read_back_under_other_settings(tmp_path):
    run_dir = tmp_path / "runs" / "robocoach" / "franka" / "seed0"
    _claim_settings(run_dir, RunSettings())
    _claim_settings(run_dir, RunSettings())  # the same settings: resumes
    with pytest.raises(ValueError, match=r"targeted_allocation.*(.top_m., .proportional.).*another --output"):
        _claim_settings(run_dir, RunSettings(targeted_allocation="proportional"))
