"""Step 5 of the offboard stage on real (untrained) checkpoints: recorded calibration rollouts, their
imagined twins, and the per-skill calibration written beside the run's models."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from offboard_models import IMAGE_SIZE, write_offboard_models

from robocoach_bringup.stages.offboard_models import (
    CALIBRATION,
    TWINS_FILE,
    CalibrateConfig,
    calibrate_command,
    rollouts_dir,
)
from robocoach_skills.bootstrap import load_experts
from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_skills.evaluation import evaluate
from robocoach_skills.measures import tally_reached
from robocoach_skills.router import Router, RouterConfig
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.skill_policy import LibraryPolicy
from robocoach_skills.tasks import get_composition
from robocoach_world.calibration import CALIBRATION_FILE, ImaginationCalibration
from robocoach_world.imagined_twins import recorded_versions

pytestmark = pytest.mark.slow

ROBOT, TASK = "franka", "press_push"  # its experts (press, push) serve both compositions below
COMPOSITIONS, SEEDS = ("press_push", "two_buttons"), [5, 6]
DEADLINE = 4  # steps: an untrained judge never confirms, so every imagined trial fails at its first subtask


def _record_calibration_rollouts(run) -> dict[str, list[int]]:
    """Deploy the run's experts on every composition and seed into its calibration store; the per-skill
    [completed, reached] of what they did."""
    store = EpisodeStore.create(
        rollouts_dir(run, ROBOT, CALIBRATION), StoreInfo(fps=10.0, image_size=(IMAGE_SIZE, IMAGE_SIZE))
    )
    library, _, versions, _ = load_experts(run / "experts")
    router = Router(
        LibraryPolicy(library, versions),
        RouterConfig(skill_deadline_steps=dict.fromkeys(library.skills, DEADLINE)),
    )
    scene = SimScene(SceneConfig(robot=ROBOT, image_size=IMAGE_SIZE))
    deployed: dict[str, list[int]] = {}
    try:
        for name in COMPOSITIONS:
            composition = get_composition(ROBOT, name)
            result = evaluate(router, scene, composition, SEEDS, record_to=store)
            first_failed = [t.ground_truth["first_failed"] for t in result.trials]
            tally_reached(first_failed, [f"{ROBOT} {s}" for s in composition.skills], deployed)
    finally:
        scene.close()
    return deployed


def test_the_calibration_pairs_each_recorded_rollout_with_its_imagined_twins(tmp_path):
    write_offboard_models(tmp_path, ROBOT, TASK, DEADLINE)
    deployed = _record_calibration_rollouts(tmp_path)
    # piper has no calibration rollouts here: it is skipped, not an error
    config = CalibrateConfig(run=tmp_path, robots=(ROBOT, "piper"), rollouts_per_state=2, horizon=12)
    written = calibrate_command(config).to_dict()

    calibration = ImaginationCalibration.load(tmp_path / CALIBRATION_FILE)
    assert calibration.to_dict() == written
    assert {k: v["deployed"] for k, v in written["per_skill"].items()} == {
        k: deployed.get(k, [0, 0]) for k in written["per_skill"]
    }
    # 2 compositions x 2 states x 2 twins, every one failing its first subtask, a press in both
    assert written["per_skill"]["franka press_button"]["imagined"] == [0, 8]
    assert written["source"]["rollouts"] == len(COMPOSITIONS) * len(SEEDS)
    assert set(written["source"]["versions"]) == {"press_button", "push"}
    rows = json.loads((tmp_path / TWINS_FILE).read_text())
    assert [r["composition"] for r in rows] == sorted(COMPOSITIONS)
    assert all(r["imagined_trials"] == 2 * len(SEEDS) and len(r["deployed_first_failed"]) == 2 for r in rows)

    with pytest.raises(ValueError, match="no calibration rollouts for piper"):
        calibrate_command(CalibrateConfig(run=tmp_path, robots=("piper",)))


def test_twins_stand_for_one_set_of_expert_versions():
    episodes = [SimpleNamespace(metadata={"expert_versions": {"pick": v, "place": 1}}) for v in (1, 1)]
    assert recorded_versions(episodes) == {"pick": 1, "place": 1}
    episodes.append(SimpleNamespace(metadata={"expert_versions": {"pick": 2}}))
    with pytest.raises(ValueError, match="pick at versions 1 and 2"):
        recorded_versions(episodes)
