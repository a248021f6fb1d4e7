"""A coach round on real (tiny) models keeps imagined failure clips, and the main job's report shows them.

The models are `offboard_models`' (experts briefly trained on scripted demos, an untrained CoachWorld
and judge with deadlines). The untrained judge never confirms a press, so every imagined trial of
two_buttons first times out at its first subtask after DEADLINE steps: that pair gets the clips.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from offboard_models import IMAGE_SIZE, write_offboard_models

from robocoach_bringup.demo import DemoConfig, StageResult, write_report
from robocoach_bringup.stages.ridi_rounds import coach_state_dir, scorecard_section
from robocoach_skills.bootstrap import load_experts
from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.router import Router, RouterConfig
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.skill_policy import LibraryPolicy
from robocoach_skills.tasks import get_composition
from robocoach_skills.teleop.scripted import ScriptedSession, ScriptedSessionConfig
from robocoach_world.coach.diagnosis import DiagnosisConfig
from robocoach_world.coach.loop import Coach, CoachConfig
from robocoach_world.coach.scorecard import SCORECARD_JSON
from robocoach_world.coach.state import Action, CoachState
from robocoach_world.experiment.ports import InitialObservations, LocalPorts, WorldModelTargets
from robocoach_world.imagine import ImaginationConfig, imagination_seeds
from robocoach_world.judge.checkpoint import DEADLINES_FILE, load_judge
from robocoach_world.judge.verdict import Deadlines
from robocoach_world.nodes.coach import STATE_FILE
from robocoach_world.world.artifacts import checkpoint_in, load_world

ROBOT, TASK = "piper", "two_buttons"
DEADLINE = 6  # steps
PNG = b"\x89PNG\r\n\x1a\n"
PAIR = "piper:press_button(red_button)"
ROUTE = ["press_button(red_button) -> press_button v0", "press_button(green_button) -> press_button v0"]


@pytest.fixture(scope="module")
def offboard(tmp_path_factory) -> dict[str, Path]:
    return write_offboard_models(tmp_path_factory.mktemp("clips_offboard"), ROBOT, TASK, DEADLINE)


@pytest.fixture
def scene():
    scene = SimScene(SceneConfig(robot=ROBOT, image_size=IMAGE_SIZE))
    yield scene
    scene.close()


def test_a_diagnosed_round_keeps_the_first_failures_of_its_top_pair_as_clips(offboard, scene, tmp_path):
    world, _ = load_world(checkpoint_in(offboard["world"]), "cpu")
    judge, verdict, _ = load_judge(offboard["judge"])
    deadlines = Deadlines.load(offboard["judge"] / DEADLINES_FILE)
    library, registry, versions, _ = load_experts(offboard["experts"])
    composition, seeds = get_composition(ROBOT, TASK), imagination_seeds(2)
    imagination = ImaginationConfig(num_rollouts=6, horizon=20)
    observations = InitialObservations(scene, seeds)
    targets = WorldModelTargets(world, judge, verdict, deadlines, library, observations, imagination, clips=2)

    # the port: frames and judge trace of the first two failed trials only, one per initial state
    imagined = targets(composition, versions)
    assert [r.first_failed_index for r in imagined.records] == [0] * 6
    assert [c.seed for c in imagined.clips] == seeds
    for clip in imagined.clips:
        assert str(clip.pair) == PAIR and list(clip.route) == ROUTE
        assert clip.frames.shape == (DEADLINE, IMAGE_SIZE, IMAGE_SIZE, 3)
        assert clip.trace.shape == (DEADLINE,) and clip.active.tolist() == [0] * DEADLINE

    # the coach's IMAGINE step writes them beside its state, as the main job lays out a run
    output = tmp_path / "run"
    state = CoachState.open(coach_state_dir(output, ROBOT) / STATE_FILE, 2, versions)
    store = EpisodeStore(offboard["store"])
    router = lambda versions: Router(LibraryPolicy(library, versions), RouterConfig())  # noqa: E731
    ports = LocalPorts(targets, ScriptedSession(scene, store, ScriptedSessionConfig()), ROBOT, router, scene)
    config = CoachConfig(budget=2, demos_per_round=2, diagnosis=DiagnosisConfig(min_reach=1))
    coach = Coach(config, state, [composition], library, registry, store, ports)
    assert coach.step() == Action.IMAGINE
    assert [(c["pair"], c["seed"], c["route"]) for c in state.clips] == [(PAIR, s, ROUTE) for s in seeds]
    assert all((state.round_dir / c["path"]).read_bytes()[:8] == PNG for c in state.clips)
    assert json.loads((state.round_dir / SCORECARD_JSON).read_text())["clips"] == state.clips
    assert CoachState.load(state.path).clips == state.clips  # a restarted coach still shows them

    # the main job's report links the PNGs from its own folder
    section = scorecard_section(output, ROBOT, 0)
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", section)
    assert len(links) == 2 and all((output / link).read_bytes()[:8] == PNG for link in links)
    results = {"markdown": section}
    write_report(
        DemoConfig(output=output, robots=(ROBOT,)), [StageResult("ridi_rounds", "done", results=results)]
    )
    html = (output / "report.html").read_text()
    assert all(f'src="{link}"' in html for link in links)
