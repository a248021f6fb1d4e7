"""The RIDI loop over in-memory ports: budget spent exactly, and a coach killed anywhere resumes cleanly."""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from coach_helpers import TASK_A, TASK_B, trials
from episode_factory import make_episode
from expert_helpers import TINY
from safetensors.torch import load_file
from torch.utils.data import DataLoader

from robocoach_skills.data.dataset import DatasetConfig, EpisodeDataset
from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_skills.experts import AdapterRegistry, ExpertConfig, ExpertLibrary, pretrain
from robocoach_skills.experts.artifacts import ADAPTER_WEIGHTS
from robocoach_world.calibration import ImaginationCalibration
from robocoach_world.coach.acceptance import AcceptanceConfig, check_seeds
from robocoach_world.coach.allocation import AllocationConfig
from robocoach_world.coach.improve import ImproveConfig
from robocoach_world.coach.loop import Coach, CoachConfig, Collected, Imagined
from robocoach_world.coach.scorecard import FailureClip
from robocoach_world.coach.state import Action, CoachState

SKILLS = ("pick", "place", "press_button")
FAILURES = {TASK_A.name: [1] * 6 + [0] * 2 + [-1] * 2, TASK_B.name: [1] * 5 + [-1] * 5}  # place fails most
CONFIG = CoachConfig(budget=8, demos_per_round=4, improve=ImproveConfig(steps=2, batch_size=8, dense_steps=2))


class CrashError(Exception):
    """The process died here."""


class MemoryPorts:
    """Imagination returns fixed trials, each failure with a clip; the station writes synthetic demos;
    `crash_after` kills it."""

    def __init__(self, store: EpisodeStore, crash_after_store: bool = False, failures=FAILURES) -> None:
        self.store, self.crash_after_store, self.failures = store, crash_after_store, failures
        self.rounds, self.pushed = [], []

    def imagine(self, composition, versions):
        records = trials(composition, self.failures[composition.name])
        frames, trace = np.zeros((4, 8, 8, 3), np.uint8), np.zeros(4)
        clips = [FailureClip.of_trial(composition, r, frames, trace) for r in records if not r.success]
        return Imagined(records, clips)

    def collect(self, request):
        ids = []
        for _ in range(request.remaining):
            episode = make_episode(
                skills=(request.subtask.skill,), size=32, steps=8, seed=500 + len(self.store)
            )
            episode.metadata["request_id"] = request.request_id
            ids.append(self.store.add(episode))
            if self.crash_after_store:  # stored, but the coach never heard of it
                raise CrashError
        return Collected(ids)

    def deploy_subtask(self, composition, index, versions, seeds):
        raise AssertionError("acceptance checks are off in CONFIG")

    def push_adapters(self, versions):
        self.pushed.extend(sorted(versions.items()))

    def publish_round(self, entry):
        self.rounds.append(entry["round"])


@pytest.fixture
def world(tmp_path):
    store = EpisodeStore.create(tmp_path / "store", StoreInfo(fps=10.0, image_size=(32, 32)))
    for skill in SKILLS:
        store.add(make_episode(skills=(skill,), size=32, steps=8, seed=len(store)))
    library = ExpertLibrary(ExpertConfig(**TINY), skills=SKILLS)
    loader = DataLoader(
        EpisodeDataset(store, DatasetConfig(chunk_len=TINY["chunk_len"], pad_channels=True)), 8
    )
    pretrain(library, loader, steps=2, progress=False)
    registry = AdapterRegistry(tmp_path / "adapters")
    for skill in SKILLS:
        registry.publish(library, skill, {"demos_used": 1})
    return tmp_path, store, library, registry


def _coach(tmp_path, store, library, registry, ports) -> Coach:
    state = CoachState.open(tmp_path / "coach" / "coach_state.json", CONFIG.budget, {s: 0 for s in SKILLS})
    return Coach(CONFIG, state, [TASK_A, TASK_B], library, registry, store, ports)


def test_rounds_spend_exactly_the_budget_on_the_failing_pairs(world):
    tmp_path, store, library, registry = world
    ports = MemoryPorts(store)
    history = _coach(tmp_path, store, library, registry, ports).run()
    assert [h["round"] for h in history] == ports.rounds == [0, 1]
    assert sum(len(r["episode_ids"]) for h in history for r in h["requests"]) == CONFIG.budget
    requested = {r["subtask"]["skill"] for h in history for r in h["requests"]}
    assert requested == {"place", "pick"}  # top-2 pairs by first-timeout mass; press never fails first
    assert registry.versions("place") == [0, 1, 2] and registry.versions("press_button") == [0]
    assert ports.pushed == [("pick", 1), ("place", 1), ("pick", 2), ("place", 2)]
    for h in history:  # the scorecard beside the state file: the two first clips of each failing pair
        folder = tmp_path / "coach" / f"round_{h['round']:03d}"
        clips = json.loads((folder / "scorecard.json").read_text())["clips"]
        pairs = ["franka:place(red_cube, bin)"] * 2 + ["franka:pick(red_cube)"] * 2  # by mass
        assert [(c["pair"], c["composition"], c["seed"]) for c in clips] == list(
            zip(pairs, ["task_a"] * 4, [100, 101, 106, 107], strict=True)
        )
        assert all((folder / c["path"]).is_file() for c in clips)
        assert (folder / "scorecard.md").read_text().strip() == h["summary"]["scorecard"]


def test_a_calibrated_coach_asks_for_demos_of_a_skill_imagination_flatters(world):
    tmp_path, store, library, registry = world
    # the red press never fails first in imagination (task_b fails at place), but deployed it completes
    # 1 in 10 times where imagined it completes 10 of 10
    calibration = ImaginationCalibration(
        {"franka press_button": {"deployed": [1, 10], "imagined": [10, 10]}}, pseudo_trials=1e-9
    )
    state = CoachState.open(tmp_path / "coach" / "coach_state.json", CONFIG.budget, {s: 0 for s in SKILLS})
    coach = Coach(CONFIG, state, [TASK_A, TASK_B], library, registry, store, MemoryPorts(store), calibration)
    assert coach.step() == Action.IMAGINE
    # calibrated masses: press 0.9 / 2, place (0.8 * 0.75 + 0.1 * 0.5) / 2, pick 0.2 / 2; uncalibrated the
    # demos go to place and pick (test_rounds_spend_exactly_the_budget_on_the_failing_pairs)
    requests = sorted((r.subtask.skill, r.count) for r in state.requests.values())
    assert requests == [("place", 2), ("press_button", 2)]
    card = (tmp_path / "coach" / "round_000" / "scorecard.md").read_text()
    assert "calibrated" in card and "| 100% -> 10% |" in card


def test_experts_whose_demos_did_not_lift_imagined_success_are_set_aside_the_next_round(world):
    tmp_path, store, library, registry = world
    # place fails first most, then the red press, then pick; imagination does not change after updates
    failures = {TASK_A.name: [1] * 6 + [0] * 2 + [-1] * 2, TASK_B.name: [1] * 5 + [0] * 3 + [-1] * 2}
    config = replace(CONFIG, allocation=AllocationConfig(min_gain=0.05))
    state = CoachState.open(tmp_path / "coach" / "coach_state.json", config.budget, {s: 0 for s in SKILLS})
    history = Coach(
        config, state, [TASK_A, TASK_B], library, registry, store, MemoryPorts(store, False, failures)
    ).run()
    requested = [sorted(r["subtask"]["skill"] for r in h["requests"]) for h in history]
    assert requested == [["place", "press_button"], ["pick"]]
    set_aside = history[1]["allocation"]["set_aside"]
    assert [s.split(" ")[0] for s in set_aside] == ["place", "press_button"]
    assert (
        "franka:place(red_cube, bin) 27% -> 27%" in set_aside[0]
    )  # reached 8 + 7 times, 6 + 5 first failures
    card = (tmp_path / "coach" / "round_001" / "scorecard.md").read_text()
    assert "set aside, no gain after their demos: place (demos in round 0" in card


PROGRESS = {("place", 0): 0.5, ("place", 1): 0.1, ("place", 2): 0.6}  # a checked version's, by skill


class CheckingPorts(MemoryPorts):
    """Deployed progress of the checked subtask by version of its skill (place's v1 does worse than v0);
    `crash_on_push` kills the coach once after the round's versions are recorded, before they are pushed."""

    def __init__(self, store, library, registry, crash_on_push: bool = False) -> None:
        super().__init__(store)
        self.library, self.registry = library, registry
        self.crash_on_push, self.deployed = crash_on_push, []

    def deploy_subtask(self, composition, index, versions, seeds):
        skill = composition.subtasks[index].skill
        # the library deploys the version checked: its weights are that version's in the registry
        weights = self.library.skill_state_dict(skill)
        saved = load_file(self.registry.path(skill, versions[skill]) / ADAPTER_WEIGHTS)
        assert all(torch.equal(weights[k].cpu(), saved[k]) for k in saved), (skill, versions[skill])
        self.deployed.append((composition.name, index, versions[skill], list(seeds)))
        return [None, *[PROGRESS.get((skill, versions[skill]), 0.5)] * (len(seeds) - 1)]

    def push_adapters(self, versions):
        if self.crash_on_push:
            self.crash_on_push = False
            raise CrashError
        super().push_adapters(versions)


@pytest.mark.parametrize("crash", [False, True])
def test_an_update_that_deploys_worse_is_rolled_back_and_its_demos_carried_into_the_next(world, crash):
    tmp_path, store, library, registry = world
    config = replace(CONFIG, acceptance=AcceptanceConfig(trials=4))
    state_file = tmp_path / "coach" / "coach_state.json"
    ports = CheckingPorts(store, library, registry, crash_on_push=crash)

    def coach() -> Coach:
        state = CoachState.open(state_file, config.budget, {s: 0 for s in SKILLS})
        return Coach(config, state, [TASK_A, TASK_B], library, registry, store, ports)

    with contextlib.suppress(CrashError):
        coach().run()
    history = coach().run()  # resumes after the crash; finished already without one
    first, second = history
    # round 0: place v1 deploys at 0.1 against v0's 0.5 over the 3 trials that reached place: rolled back
    check = first["checks"]["place"]
    assert (check["accepted"], check["version"], check["parent"], check["paired"]) == (False, 1, 0, 3)
    assert check["parent_score"] == pytest.approx(0.5) and check["new_score"] == pytest.approx(0.1)
    assert first["improved"] == {"pick": 1, "place": 0} and first["checks"]["pick"]["accepted"]
    round0_place = [
        e for r in first["requests"] if r["subtask"]["skill"] == "place" for e in r["episode_ids"]
    ]
    assert check["demos"] == round0_place
    # the check ran place where each round asked its demos (task_a's subtask 1), from 4 seeds, each
    # version once (a crash after recording does not check again)
    place_checks = [d for d in ports.deployed if d[:2] == ("task_a", 1)]
    assert place_checks == [("task_a", 1, v, check_seeds(4)) for v in (0, 1, 0, 2)]
    # round 1: place v2 trains on round 0's carried demos and its own, deploys better, and is kept
    round1_place = [
        e for r in second["requests"] if r["subtask"]["skill"] == "place" for e in r["episode_ids"]
    ]
    assert second["checks"]["place"]["accepted"] and second["improved"]["place"] == 2
    assert second["checks"]["place"]["demos"] == round0_place + round1_place
    assert registry.meta("place", 2).metrics["coach/new_demos"] == len(round0_place + round1_place)
    assert registry.meta("place", 2).parent_version == 0  # trained from the version that stayed active
    assert registry.active_version("place") == 2 and ports.pushed[:2] == [("pick", 1), ("place", 0)]
    # a rolled-back update is no verdict on the expert: place is not set aside in round 1
    assert [s.split(" ")[0] for s in second["allocation"]["set_aside"]] == ["pick"]


def test_a_coach_killed_between_any_two_steps_or_mid_collection_loses_and_repeats_nothing(world):
    tmp_path, store, library, registry = world
    steps = 0
    while True:  # a new process (state read from disk) for every step; every third one dies mid-collect
        crash = steps % 3 == 1
        coach = _coach(tmp_path, store, library, registry, MemoryPorts(store, crash_after_store=crash))
        if coach.finished:
            break
        with contextlib.suppress(CrashError):
            coach.step()
        steps += 1
    state = CoachState.load(tmp_path / "coach" / "coach_state.json")
    coach_demos = [m.episode_id for m in store.iter_meta() if "request_id" in m.metadata]
    assert state.demos_spent == CONFIG.budget == len(coach_demos)  # every stored demo counted, once
    assert sorted(state.received_ids()) == sorted(coach_demos)
    assert state.next_step().action == Action.DONE and len(state.history) == CONFIG.rounds
    assert registry.versions("place") == [0, 1, 2]  # one retraining per round, never repeated


def test_config_and_state_must_agree_on_the_budget(world):
    tmp_path, store, library, registry = world
    state = CoachState.open(tmp_path / "other.json", budget=3)
    with pytest.raises(ValueError, match="budget"):
        Coach(CONFIG, state, [TASK_A], library, registry, store, MemoryPorts(store))


def test_a_busy_station_is_asked_again_and_nothing_is_rejected(world):
    tmp_path, store, library, registry = world

    class BusyOnce(MemoryPorts):
        def __init__(self, store):
            super().__init__(store)
            self.busy = 1

        def collect(self, request):
            if self.busy:
                self.busy -= 1
                return Collected([], "goal not accepted (the server is busy)", retry=True)
            return super().collect(request)

    history = _coach(tmp_path, store, library, registry, BusyOnce(store)).run()
    assert not any(r["rejection"] for h in history for r in h["requests"])
    assert sum(len(r["episode_ids"]) for h in history for r in h["requests"]) == CONFIG.budget
