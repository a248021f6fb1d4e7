"""The whole sim graph (`graph.describe_graph` + `processes.running_nodes`, as the launch files and
`robocoach demo` start it) coaching a tiny budget: sim robot, executor, task markers, world model,
judge, scripted operator and coach, each its own process exchanging robocoach_msgs over DDS.

One test lets the coach spend its budget undisturbed; the other SIGKILLs it mid-collection and again
mid-improve, restarts it with the same parameters each time, and checks the issue's rule: the round
resumes with no demo lost or counted twice and no adapter retrained twice. Both check each round's
operator scorecard: imagined failure clips the world model returned, written beside the coach state
and published for the station.

Every check reads what the processes really wrote (the coach state file, the episode store, the
adapter registry, node logs) or published (DemoRequest, DemoEpisode, CoachRound on the operator topics).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from offboard_models import write_offboard_models
from std_msgs.msg import String

from robocoach_bringup.graph import GraphConfig, NodeSpec, describe_graph
from robocoach_bringup.processes import RunningNode, running_nodes
from robocoach_msgs.msg import CoachRound, DemoEpisode, DemoRequest
from robocoach_msgs.srv import GetExperts
from robocoach_skills.constants import (
    SERVICE_GET_EXPERTS,
    TOPIC_COACH_ROUNDS,
    TOPIC_COACH_SCORECARD,
    TOPIC_DEMO_EPISODES,
    TOPIC_DEMO_REQUESTS,
)
from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.experts.registry import AdapterRegistry
from robocoach_skills.nodes.station import OPERATOR_QOS
from robocoach_skills.tasks import get_composition
from robocoach_world.coach.improve import ROUND_METRIC
from robocoach_world.coach.scorecard import SCORECARD_JSON
from robocoach_world.coach.state import ROUND_DIR
from robocoach_world.nodes.coach import EXIT_STOPPED_EARLY, STATE_FILE
from ros_harness import call_service, spin_until

pytestmark = pytest.mark.ros

ROBOT, TASK = "piper", "two_buttons"
DEADLINE = 20  # steps: the untrained judge never confirms, so every imagined trial times out at once
BUDGET, PER_ROUND = 4, 2
ROUNDS = BUDGET // PER_ROUND
SKILL = "press_button"  # the only pair reached by enough trials: the first subtask of two_buttons
COACH = {
    "compositions": [TASK],
    "budget": BUDGET,
    "demos_per_round": PER_ROUND,
    "initial_states": 2,
    "num_rollouts": 8,
    "horizon": 30,
    "train_steps": 5,
    "dense_steps": 5,
    "exit_when_done": True,
}
TAKE_PAUSE_S = 3.0  # [s] the scripted operator's pause between takes in the killed-coach test
COACH_TIMEOUT_S = 150.0  # two rounds on two shared cores take about a minute


@pytest.fixture(scope="module")
def offboard(tmp_path_factory) -> Path:
    """Experts, episodes, world and judge for the tests' run directories (copied per test)."""
    root = tmp_path_factory.mktemp("coach_offboard")
    write_offboard_models(root, ROBOT, TASK, DEADLINE)
    return root


@dataclass
class Heard:
    """What the test process heard on the operator and coach topics."""

    requests: list[DemoRequest] = field(default_factory=list)
    episodes: list[DemoEpisode] = field(default_factory=list)
    rounds: list[CoachRound] = field(default_factory=list)
    scorecards: list[String] = field(default_factory=list)

    def accepted_ids(self, run_id: str) -> list[str]:
        return [e.episode_id for e in self.episodes if e.accepted and e.request_id.startswith(run_id)]


@dataclass
class Graph:
    run_dir: Path
    nodes: dict[str, RunningNode]
    coach_spec: NodeSpec  # the coach, to start it again with the same parameters
    heard: Heard

    @property
    def state_file(self) -> Path:
        return Path(self.coach_spec.parameters["state_dir"]) / STATE_FILE

    def state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except FileNotFoundError:  # the coach has not written it yet
            return {}

    def check_alive(self, except_: str = "coach") -> None:
        """Fail with its log if a node other than `except_` died."""
        for name, node in self.nodes.items():
            if name != except_ and not node.alive():
                pytest.fail(
                    f"node {name} exited with {node.process.returncode}; its log:\n{node.log()[-4000:]}"
                )


@pytest.fixture
def operator() -> dict:
    """Scripted operator parameters over the YAML's; a test overrides them by parametrizing `operator`."""
    return {}


@pytest.fixture
def coach_overrides() -> dict:
    """Coach parameters over COACH; a test overrides them by parametrizing `coach_overrides`."""
    return {}


@pytest.fixture
def graph(ros_probe, offboard, operator, coach_overrides, tmp_path):
    """The whole sim graph from `describe_graph` on a fresh copy of the offboard run directory."""
    run_dir = tmp_path / "run"
    shutil.copytree(offboard, run_dir)
    overrides = {"coach": {**COACH, **coach_overrides}, "scripted_operator": operator}
    specs = describe_graph(GraphConfig(robot=ROBOT, backend="sim", run_dir=run_dir, overrides=overrides))
    executor = next(s for s in specs if s.name == "skill_executor")
    assert executor.parameters["detector"] == "judge"
    assert executor.parameters["judge_dir"] == str(run_dir / "judge")
    heard = Heard()
    subscriptions = [
        ros_probe.create_subscription(DemoRequest, TOPIC_DEMO_REQUESTS, heard.requests.append, OPERATOR_QOS),
        ros_probe.create_subscription(DemoEpisode, TOPIC_DEMO_EPISODES, heard.episodes.append, OPERATOR_QOS),
        ros_probe.create_subscription(CoachRound, TOPIC_COACH_ROUNDS, heard.rounds.append, OPERATOR_QOS),
        ros_probe.create_subscription(String, TOPIC_COACH_SCORECARD, heard.scorecards.append, OPERATOR_QOS),
    ]
    try:
        with running_nodes(specs, tmp_path / "logs", ros_probe.get_node_names) as nodes:
            yield Graph(run_dir, nodes, next(s for s in specs if s.name == "coach"), heard)
    finally:
        for subscription in subscriptions:
            ros_probe.destroy_subscription(subscription)


def _spin_or_fail(probe, graph: Graph, coach: RunningNode, done, what: str) -> None:
    """Spin the probe until `done()`; past COACH_TIMEOUT_S fail with the logs of the coach and the
    nodes it waits on, which say where it stood."""
    try:
        spin_until(probe, done, COACH_TIMEOUT_S, what)
    except TimeoutError as error:
        logs = [coach, graph.nodes["world_model"], graph.nodes["scripted_operator"]]
        pytest.fail(f"{error}\n" + "\n".join(f"{n.name}'s log:\n{n.log()[-3000:]}" for n in logs))


def _spin_while_coaching(probe, graph: Graph, coach: RunningNode, until, what: str) -> None:
    """Spin the probe until `until()`, failing if another node dies or the coach exits first."""

    def done() -> bool:
        graph.check_alive()
        if until():
            return True
        if not coach.alive():
            pytest.fail(
                f"the coach exited with {coach.process.returncode} before {what}:\n{coach.log()[-4000:]}"
            )
        return False

    _spin_or_fail(probe, graph, coach, done, what)


def _wait_for_exit(probe, graph: Graph, coach: RunningNode) -> None:
    _spin_or_fail(probe, graph, coach, lambda: graph.check_alive() or not coach.alive(), "the coach to exit")
    assert coach.process.returncode == 0, coach.log()[-4000:]
    spin_until(probe, lambda: True, 0.5)  # take in what is still in flight


def _loaded(node: RunningNode, version: int) -> bool:
    """Whether `node` (executor or world model) has activated SKILL `version` on a LoadAdapter call."""
    return f"LoadAdapter {SKILL} v{version}: {SKILL} v{version} active" in node.log()


def _kill(coach: RunningNode) -> None:
    """SIGKILL: no handler runs, nothing is flushed or saved on the way out."""
    os.killpg(coach.process.pid, signal.SIGKILL)
    coach.process.wait(timeout=10)


def _counted_ids(state: dict) -> list[str]:
    """Every demo the coach counted, over its closed rounds (with repeats, if any were counted twice)."""
    return [e for entry in state["history"] for r in entry["requests"] for e in r["episode_ids"]]


def _stored_ids(run_dir: Path, run_id: str) -> list[str]:
    """Demos in the episode store recorded for a request of coach run `run_id`."""
    store = EpisodeStore(run_dir / "episodes")
    return [
        m.episode_id
        for m in store.iter_meta(kind="demo")
        if str(m.metadata.get("request_id", "")).startswith(f"{run_id}-")
    ]


def _coach_versions(run_dir: Path) -> dict[int, list[int]]:
    """Coach round -> the adapter versions of SKILL published in that round."""
    registry = AdapterRegistry(run_dir / "experts" / "adapters")
    published: dict[int, list[int]] = {}
    for version in registry.versions(SKILL):
        round_index = registry.meta(SKILL, version).metrics.get(ROUND_METRIC)
        if round_index is not None:
            published.setdefault(int(round_index), []).append(version)
    return published


def _check_budget_spent_once(probe, graph: Graph) -> dict:
    """The checks both tests share: the budget spent exactly, each demo counted once, one adapter
    version per round, and those versions active on the executor and the world model."""
    state = graph.state()
    run_id = state["run_id"]
    assert state["round"] == ROUNDS and state["demos_spent"] == BUDGET, state
    counted = _counted_ids(state)
    assert len(counted) == BUDGET and len(set(counted)) == BUDGET, counted
    # the store holds exactly the counted demos for this run's requests, each with its request id
    stored = _stored_ids(graph.run_dir, run_id)
    assert sorted(stored) == sorted(counted)
    store = EpisodeStore(graph.run_dir / "episodes")
    by_request = {
        e: r["request_id"] for h in state["history"] for r in h["requests"] for e in r["episode_ids"]
    }
    assert all(store.meta(e).metadata["request_id"] == by_request[e] for e in counted)
    # the station told the graph of exactly these accepted demos
    assert sorted(graph.heard.accepted_ids(run_id)) == sorted(counted)

    # one retrained version per round, pushed to the executor and the world model
    published = _coach_versions(graph.run_dir)
    assert published == {r: [r + 1] for r in range(ROUNDS)}, published
    assert [h["improved"] for h in state["history"]] == [{SKILL: r + 1} for r in range(ROUNDS)]
    assert state["adapter_versions"][SKILL] == ROUNDS
    executor = call_service(probe, GetExperts, SERVICE_GET_EXPERTS, GetExperts.Request(skill=SKILL))
    assert [e.adapter_version for e in executor.experts] == [ROUNDS]
    for node in (graph.nodes["skill_executor"], graph.nodes["world_model"]):
        assert all(_loaded(node, v) for v in range(1, ROUNDS + 1)), (node.name, node.log()[-3000:])
    # round 1 was imagined by the world model with round 0's adapter
    round_1 = state["history"][1]["records"]
    skill_versions = {dict(zip(r["skills"], r["versions"], strict=True))[SKILL] for r in round_1}
    assert skill_versions == {1}

    # what the coach published
    assert {r.request_id.split("-")[0] for r in graph.heard.requests} == {run_id}
    assert sorted({r.round for r in graph.heard.requests}) == list(range(ROUNDS))
    rounds = [m for m in graph.heard.rounds if m.demo_budget == BUDGET]
    assert [m.round for m in rounds] == list(range(ROUNDS))
    assert rounds[-1].demos_spent == BUDGET
    assert all(SKILL in a for m in rounds for a in m.allocation_skills)

    # each round's scorecard: the first failures' clips (every trial times out at press_button first)
    for entry in state["history"]:
        folder = graph.state_file.parent / ROUND_DIR.format(round=entry["round"])
        clips = json.loads((folder / SCORECARD_JSON).read_text())["clips"]
        assert [c["pair"] for c in clips] == [f"{ROBOT}:{get_composition(ROBOT, TASK).subtasks[0]}"] * 2
        assert all((folder / c["path"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for c in clips)
        assert all(f"]({c['path']})" in entry["summary"]["scorecard"] for c in clips)
    assert [m.data for m in graph.heard.scorecards][-ROUNDS:] == [
        h["summary"]["scorecard"] for h in state["history"]
    ]
    return state


@pytest.mark.slow
def test_graph_spends_the_budget_and_updates_the_adapters(ros_probe, graph):
    # the executor (detector "judge", checked by the fixture) got through its constructor, which
    # loads the untrained judge and its deadlines, and is up
    assert f"{ROBOT} executor: experts [('{SKILL}', 0)]" in graph.nodes["skill_executor"].log()
    coach = graph.nodes["coach"]
    _wait_for_exit(ros_probe, graph, coach)
    _check_budget_spent_once(ros_probe, graph)
    assert "coaching finished after 2 rounds" in coach.log()


@pytest.mark.slow
def test_a_coach_stopped_by_an_error_says_so_in_its_exit_status_and_keeps_its_state(
    ros_probe, offboard, tmp_path
):
    # alone, with no sim robot to reset the scene or publish the camera: the first round cannot start
    shutil.copytree(offboard, tmp_path / "run")
    overrides = {"coach": {**COACH, "reset_scene": False}}
    specs = describe_graph(
        GraphConfig(robot=ROBOT, backend="sim", run_dir=tmp_path / "run", overrides=overrides)
    )
    spec = next(s for s in specs if s.name == "coach")
    with running_nodes([spec], tmp_path / "logs", ros_probe.get_node_names) as nodes:
        coach = nodes["coach"]
        coach.process.wait(timeout=COACH_TIMEOUT_S)
        assert coach.process.returncode == EXIT_STOPPED_EARLY, coach.log()[-3000:]
        assert "coaching stopped: no camera frame and joint state within 10.0 s" in coach.log()
    state = json.loads((Path(spec.parameters["state_dir"]) / STATE_FILE).read_text())
    assert (state["round"], state["phase"], state["demos_spent"]) == (0, "imagine", 0)


@pytest.mark.slow
@pytest.mark.parametrize("coach_overrides", [{"acceptance_trials": 2}])
def test_the_coach_checks_each_update_on_the_executor_before_keeping_it(ros_probe, graph):
    coach = graph.nodes["coach"]
    _wait_for_exit(ros_probe, graph, coach)
    state = graph.state()
    assert len(state["history"]) == ROUNDS, coach.log()[-3000:]
    for entry in state["history"]:
        check = entry["checks"][SKILL]
        # the press opens two_buttons, so every check trial reaches it; progress is the executor's judge's
        assert check["trials"] == check["paired"] == 2 and check["sites"] == [
            f"{SKILL}(red_button) in {TASK}"
        ]
        assert all(0.0 <= p <= 1.0 for p in check["parent_progress"] + check["new_progress"])
        assert entry["improved"] == {SKILL: check["version"] if check["accepted"] else check["parent"]}
    # each check trial was an ExecuteTask goal on the executor: 2 per version, both versions, every round
    executor = graph.nodes["skill_executor"]
    assert executor.log().count("ExecuteTask ") >= 2 * 2 * ROUNDS, executor.log()[-3000:]
    experts = call_service(ros_probe, GetExperts, SERVICE_GET_EXPERTS, GetExperts.Request(skill=SKILL))
    assert [e.adapter_version for e in experts.experts] == [state["adapter_versions"][SKILL]]


# The coach counts a request's demos when the station's goal returns, after its last take; the pause
# between takes keeps step 1's kill (on hearing the first take) ahead of that on a loaded machine,
# where a 0.4 s take once lost the race.
@pytest.mark.slow
@pytest.mark.parametrize("operator", [{"reset_pause_s": TAKE_PAUSE_S}])
def test_a_killed_coach_resumes_without_losing_or_recounting(ros_probe, graph, tmp_path):
    coach = graph.nodes["coach"]

    def restart(log_name: str):
        return running_nodes([graph.coach_spec], tmp_path / log_name, ros_probe.get_node_names)

    # 1. mid-collection: the station has stored the round's first demo, the coach has counted none
    _spin_while_coaching(
        ros_probe, graph, coach, lambda: any(e.accepted for e in graph.heard.episodes), "the first demo"
    )
    _kill(coach)
    station = graph.nodes["scripted_operator"]
    os.killpg(station.process.pid, signal.SIGSTOP)  # the killed coach's goal waits before its second take
    killed = graph.state()
    assert (killed["round"], killed["phase"]) == (0, "collect"), killed
    assert killed["demos_spent"] < PER_ROUND
    run_id = killed["run_id"]

    # 2. restarted inside the killed coach's goal (docs/coach.md, "Killed mid-collection"): the coach
    # adopts the one stored demo and asks again for the request's total while the station runs the
    # old goal. Refused as busy, it adopts again later; accepted just as the old goal ends, the station
    # answers from its store. Either way no demo is recorded twice (checked at the end). Before goals
    # were idempotent, 3 of 6 runs that restarted in this window stored a demo never counted.
    # Then mid-improve, pinned between the two LoadAdapter calls: with the world model
    # paused (SIGSTOP; a paused node answers no discovery either) the coach counts the demos,
    # publishes round 0's adapter, pushes it to the executor, then waits for the world model's
    # service; killed there.
    world_model = graph.nodes["world_model"]
    executor = graph.nodes["skill_executor"]
    os.killpg(world_model.process.pid, signal.SIGSTOP)
    try:
        with restart("restart_1") as nodes:
            coach = nodes["coach"]
            adopted = "adopted 1 demos recorded while the coach was down"
            _spin_while_coaching(ros_probe, graph, coach, lambda: adopted in coach.log(), "the adoption")
            os.killpg(station.process.pid, signal.SIGCONT)
            _spin_while_coaching(
                ros_probe, graph, coach, lambda: _loaded(executor, 1), "round 0's adapter on the executor"
            )
            _kill(coach)
    finally:
        for node in (station, world_model):
            os.killpg(node.process.pid, signal.SIGCONT)
    killed = graph.state()
    assert (killed["run_id"], killed["round"], killed["phase"]) == (run_id, 0, "improve"), killed
    assert killed["demos_spent"] == PER_ROUND and killed["improved"] == {SKILL: 1}
    assert not _loaded(world_model, 1)

    # 3. to the end of the budget
    with restart("restart_2") as nodes:
        coach = nodes["coach"]
        _wait_for_exit(ros_probe, graph, coach)
        final_log = coach.log()
    state = _check_budget_spent_once(ros_probe, graph)
    assert state["run_id"] == run_id
    assert "round 0, 2/4 demos spent, phase improve" in final_log  # it resumed where it was killed
    # recorded before the kill: not trained again (round 1's update is v2), pushed again to both nodes
    assert "round 0 retrained" not in final_log and f"round 1 retrained {SKILL}: v2" in final_log
