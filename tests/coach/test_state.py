"""Coach state: atomic persistence and crash-safe resumption (no demo lost or counted twice)."""

from __future__ import annotations

import json
import os

import pytest
from coach_helpers import TASK_A, TASK_B, trials
from episode_factory import make_episode

from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_world.coach.allocation import allocate
from robocoach_world.coach.diagnosis import diagnose
from robocoach_world.coach.state import Action, CoachState, Phase

BUDGET, PER_ROUND = 20, 10
RECORDS = {  # the imagined outcome of each composition; every round sees the same
    "task_a": trials(TASK_A, [1, 1, 0, -1], states=[(3, 103), (3, 103), (5, 105), (6, 106)]),
    "task_b": trials(TASK_B, [-1, 1], states=[(0, 200), (1, 201)]),
}
VERSIONS = {"pick": 0, "place": 0, "press_button": 0}


def _store(path) -> EpisodeStore:
    return EpisodeStore.create(path, StoreInfo(fps=10.0, image_size=(16, 16)))


def _record_demo(store: EpisodeStore, request) -> str:
    """What the demo station does: the accepted take is in the store before anyone is told."""
    metadata = {"request_id": request.request_id, "round": request.round}
    return store.add(make_episode(skills=(request.subtask.skill,), seed=len(store), metadata=metadata))


def _act(state: CoachState, store: EpisodeStore, deliver) -> bool:
    """One coach step chosen only from `next_step()`, as a restarted coach would; False when done."""
    step = state.next_step()
    if step.action == Action.IMAGINE:
        todo = [name for name in RECORDS if ("franka", name) not in step.imagined]
        if todo:
            state.add_records(RECORDS[todo[0]])
        else:
            diagnosis = diagnose(state.records, [TASK_A, TASK_B])
            state.issue_requests(allocate(diagnosis, min(PER_ROUND, state.budget_left)))
    elif step.action == Action.COLLECT:
        state.adopt_stored(store)  # demos recorded while the coach was down
        open_requests = state.next_step().requests
        if open_requests:
            episode_id = _record_demo(store, open_requests[0])
            if deliver():  # the DemoEpisode message reached the coach
                assert state.receive_demo(open_requests[0].request_id, episode_id)
    elif step.action == Action.IMPROVE:
        if step.skills:
            state.record_adapter(step.skills[0], state.adapter_versions[step.skills[0]] + 1)
        else:
            state.finish_round({"note": "ok"})
    return step.action != Action.DONE


def _run(tmp_path, crash_every_step: bool, lose_every: int = 0):
    path, store = tmp_path / "coach.json", _store(tmp_path / "store")
    state = CoachState.open(path, BUDGET, VERSIONS)
    sent = [0]

    def deliver() -> bool:
        sent[0] += 1
        return not lose_every or sent[0] % lose_every != 0

    while _act(state, store, deliver):
        if crash_every_step:
            state = CoachState.open(path, BUDGET)  # a fresh process reading the file
    return state, store


def _without_run_id(state: CoachState) -> str:
    return json.dumps(state.to_dict()).replace(state.run_id, "RUN")


def test_one_round_by_hand(tmp_path):
    state = CoachState.open(tmp_path / "coach.json", BUDGET, VERSIONS)
    state.add_records(RECORDS["task_a"])
    state.add_records(RECORDS["task_b"])
    requests = state.issue_requests(allocate(diagnose(state.records, [TASK_A, TASK_B]), PER_ROUND))
    # only place(red_cube, bin) is eligible (reached 5 times); its sites alternate task_a 103, task_b 201.
    first, second = f"{state.run_id}-r000-00", f"{state.run_id}-r000-01"
    assert [(r.request_id, r.composition, r.count, r.seeds) for r in requests] == [
        (first, "task_a", 5, (103,)),
        (second, "task_b", 5, (201,)),
    ]
    assert all(r.subtask.skill == "place" for r in requests) and requests[0].priority == 1.0
    assert state.phase == Phase.COLLECT and state.budget_left == BUDGET - PER_ROUND
    for k in range(5):
        assert state.receive_demo(first, f"episode_{k:06d}")
    assert not state.receive_demo(first, "episode_000099")  # surplus: the request is filled
    assert not state.receive_demo(second, "episode_000000")  # already counted for the first request
    assert not state.receive_demo("r999-00", "episode_000100")  # unknown request
    state.reject_request(second, "unreachable initial state")
    assert state.phase == Phase.IMPROVE and state.demos_spent == 5
    assert state.budget_left == BUDGET - 5  # the rejected request's demos go back to the budget
    assert state.next_step().skills == ("place",)
    with pytest.raises(ValueError, match="still has to retrain"):
        state.finish_round()
    state.record_adapter("place", 1)
    entry = state.finish_round()
    assert entry["round"] == 0 and entry["improved"] == {"place": 1}
    assert (state.round, state.phase, state.records, state.requests) == (1, Phase.IMAGINE, [], {})
    assert state.adapter_versions == {"pick": 0, "place": 1, "press_button": 0}
    assert CoachState.load(state.path).to_dict() == state.to_dict()


def test_crash_after_every_step_ends_where_an_uninterrupted_run_ends(tmp_path):
    straight, _ = _run(tmp_path / "straight", crash_every_step=False)
    resumed, store = _run(tmp_path / "resumed", crash_every_step=True)
    assert _without_run_id(resumed) == _without_run_id(straight)
    assert resumed.next_step().action == Action.DONE
    assert resumed.demos_spent == BUDGET and len(resumed.history) == BUDGET // PER_ROUND
    assert resumed.received_ids() == set(store.ids())  # every recorded demo counted exactly once
    assert resumed.adapter_versions["place"] == 2  # one new version per round


def test_demos_whose_message_was_lost_are_adopted_from_the_store_once(tmp_path):
    state, store = _run(tmp_path, crash_every_step=True, lose_every=3)
    assert len(store) == BUDGET  # nothing re-requested: a lost message is not a lost demo
    assert state.received_ids() == set(store.ids()) and state.demos_spent == BUDGET


def test_adopt_and_redelivery_count_a_demo_once(tmp_path):
    store = _store(tmp_path / "store")
    state = CoachState.open(tmp_path / "coach.json", BUDGET, VERSIONS)
    state.add_records([*RECORDS["task_a"], *RECORDS["task_b"]])
    request = state.issue_requests(allocate(diagnose(state.records, [TASK_A, TASK_B]), PER_ROUND))[0]
    episode_id = _record_demo(store, request)
    other_run = request.request_id.replace(state.run_id, "otherrun")
    store.add(
        make_episode(seed=99, metadata={"request_id": other_run})
    )  # another run's same-numbered request
    state = CoachState.open(state.path, BUDGET)  # crash before the DemoEpisode message arrived
    assert state.adopt_stored(store) == [episode_id]
    assert state.adopt_stored(store) == []
    assert not state.receive_demo(request.request_id, episode_id)  # the message, redelivered late
    assert state.demos_spent == 1 and state.requests[request.request_id].remaining == 4


def test_records_of_a_composition_are_added_once_per_round(tmp_path):
    state = CoachState.open(tmp_path / "coach.json", BUDGET)
    state.add_records(RECORDS["task_a"])
    state = CoachState.open(tmp_path / "coach.json", BUDGET)
    assert state.next_step().imagined == (("franka", "task_a"),)
    with pytest.raises(ValueError, match="count twice"):
        state.add_records(RECORDS["task_a"][:1])
    with pytest.raises(RuntimeError, match="phase imagine"):
        state.record_adapter("pick", 1)


def test_a_failed_write_leaves_the_previous_state(tmp_path, monkeypatch):
    state = CoachState.open(tmp_path / "coach.json", BUDGET)
    state.add_records(RECORDS["task_a"])
    before = (tmp_path / "coach.json").read_bytes()

    def crash(*_):
        raise OSError("killed mid-write")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="killed"):
        state.add_records(RECORDS["task_b"])
    assert (tmp_path / "coach.json").read_bytes() == before
    assert len(json.loads(before)["records"]) == len(RECORDS["task_a"])


def test_budget_is_checked(tmp_path):
    state = CoachState.open(tmp_path / "coach.json", 3)
    state.add_records([*RECORDS["task_a"], *RECORDS["task_b"]])
    with pytest.raises(ValueError, match="exceeds the 3 left"):
        state.issue_requests(allocate(diagnose(state.records, [TASK_A, TASK_B]), 4))
    with pytest.raises(ValueError, match="budget of 3, not 5"):
        CoachState.open(tmp_path / "coach.json", 5)
    assert CoachState.open(tmp_path / "zero.json", 0).next_step().action == Action.DONE


def test_a_run_id_given_names_a_new_state_and_the_file_keeps_it_on_resume(tmp_path):
    state = CoachState.open(tmp_path / "coach.json", BUDGET, VERSIONS, run_id="0000abcd")
    assert state.run_id == json.loads(state.path.read_text())["run_id"] == "0000abcd"
    assert CoachState.open(tmp_path / "coach.json", BUDGET, run_id="ffffffff").run_id == "0000abcd"
    assert CoachState.open(tmp_path / "drawn.json", BUDGET).run_id != "0000abcd"  # none given: drawn
