"""The reduced profile of `robocoach experiment`, end to end, on a tiny but real prepared run directory.

Every method but (f) goes through the coach's loop with its real ports (SimScene, ScriptedSession,
CoachWorld and judge checkpoints, deployed evaluation); (f) records whole-task demos on the same SimScene.
The checks are the issue's: every subtask-demo method consumed the same number of demos, (f) the same
budget in demo frames (each round's share reached, overshot by less than its last demo, whole-task
demos round-robin over the training compositions from seeds apart from the evaluation seeds), every
method was evaluated from the same initial states, and a finished experiment is read back rather than
redone. `robocoach fidelity` then imagines every modular checkpoint of it.
"""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import pytest
import torch
from offboard_models import write_offboard_models

from robocoach_bringup.experiment import PROFILES, ExperimentConfig, run_experiment
from robocoach_skills.bootstrap import ADAPTERS_DIR, load_experts
from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.evaluation import evaluation_seeds
from robocoach_skills.experts.registry import AdapterRegistry
from robocoach_skills.tasks import get_composition
from robocoach_world.calibration import CALIBRATION_FILE, ImaginationCalibration
from robocoach_world.experiment.end_to_end import WHOLE_TASK_SEED_BASE
from robocoach_world.experiment.fidelity import FidelityConfig, _claim, checkpoints_to_imagine, run_fidelity
from robocoach_world.experiment.methods import METHODS, PolicyKind
from robocoach_world.experiment.runner import RunSpec, load_policy

pytestmark = pytest.mark.slow

ROBOT, TASK = "franka", "press_push"  # its experts serve every composition of the reduced profile
DEADLINE = 4  # steps: an untrained judge never confirms, so every trial ends quickly


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    run = tmp_path_factory.mktemp("prepared_run")
    write_offboard_models(run, ROBOT, TASK, DEADLINE)
    config = ExperimentConfig(run=run, output=run / "experiment", profile="reduced", robots=(ROBOT,))
    return config, run_experiment(config)


def test_every_method_spends_the_same_demos_from_the_same_evaluation_states(experiment):
    config, result = experiment
    settings, seeds = PROFILES["reduced"]
    runs = result["runs"]
    assert sorted(r["method"] for r in runs) == sorted(METHODS) and len(runs) == len(METHODS) * seeds
    rounds = settings.budget // settings.demos_per_round
    for r in runs:
        assert len(r["checkpoints"]) == len(r["rounds"]) + 1 == rounds + 1
        strategy = METHODS[r["method"]].strategy(settings.targeted_allocation)
        assert [round_["strategy"] for round_ in r["rounds"]] == [strategy] * rounds
        if METHODS[r["method"]].policy == PolicyKind.END_TO_END:
            _check_frame_budget(config, settings, r)
        else:
            spec = RunSpec(r["method"], r["robot"], r["seed"])
            state = json.loads((config.output / "runs" / spec.key / "coach_state.json").read_text())
            assert state["run_id"] == spec.run_id  # a rerun names its requests, and so its demos, alike
            for round_ in r["rounds"]:  # every update was deployed against its parent before it was kept
                checks = round_["checks"]
                assert set(checks) == set(round_["improved"]), round_
                assert all(c["trials"] == settings.check_trials == 2 for c in checks.values())
                kept = {s: c["version"] if c["accepted"] else c["parent"] for s, c in checks.items()}
                assert kept == round_["improved"]
            assert r["demos"] == settings.budget
            assert [c["demos"] for c in r["checkpoints"]] == [
                k * settings.demos_per_round for k in range(rounds + 1)
            ]
            assert all(c["unsupported"] == [] for c in r["checkpoints"])
        phases = r["phase_seconds"]  # every phase of the schedule ran and was timed inside the run's time
        whole_task = METHODS[r["method"]].policy == PolicyKind.END_TO_END  # (f) imagines nothing
        expected = {"collect", "improve", "evaluate"} | (set() if whole_task else {"imagine"})
        assert set(phases) == expected and min(phases.values()) > 0 and sum(phases.values()) <= r["seconds"]
        frames = np.cumsum([0] + [round_["demo_frames"] for round_ in r["rounds"]]).tolist()
        assert [c["demo_frames"] for c in r["checkpoints"]] == frames
        assert r["eval_seeds"] == runs[0]["eval_seeds"] and len(r["eval_seeds"]) == settings.eval_rollouts
        for checkpoint in r["checkpoints"]:
            assert set(checkpoint["outcomes"]) == {*settings.training, *settings.held_out}
            assert {len(v) for v in checkpoint["outcomes"].values()} == {settings.eval_rollouts}
            for name, timed_out in checkpoint["timed_out"].items():  # the router's timeouts, per trial
                pairs = zip(checkpoint["outcomes"][name], checkpoint["first_failed"][name], strict=True)
                for (ok, first), t in zip(pairs, timed_out, strict=True):
                    assert -1 <= t < len(r["subtasks"][name]) and (not ok or t == first == -1)
    assert (config.output / "report.md").exists() and (config.output / "success_vs_budget.png").exists()
    on_disk = json.loads((config.output / "experiment.json").read_text())
    assert len(on_disk["summary"]["table"]) == len(METHODS)
    reference = next(row for row in on_disk["summary"]["table"] if row["method"] == "robocoach")
    assert "paired_vs_robocoach" not in reference
    assert all("paired_vs_robocoach" in row for row in on_disk["summary"]["table"] if row is not reference)
    assert all(None not in row["failure_endings"] for row in on_disk["summary"]["table"])
    for row in on_disk["summary"]["table"]:  # the report counts every run's checked and rolled-back updates
        checks = [
            c for r in runs if r["method"] == row["method"] for h in r["rounds"] for c in h["checks"].values()
        ]
        assert row["checks"] == [len(checks), sum(not c["accepted"] for c in checks)]
        assert (row["checks"][0] > 0) == (METHODS[row["method"]].policy != PolicyKind.END_TO_END)
    assert "updates checked / rolled back" in (config.output / "report.md").read_text()


def test_runs_that_start_from_the_same_policy_share_one_budget_0_evaluation(experiment):
    config, result = experiment
    starts: dict[str, list[dict]] = {}
    for r in result["runs"]:
        kind = METHODS[r["method"]].policy
        key = kind if kind == PolicyKind.MODULAR else f"{kind}/seed{r['seed']}"  # modular: any seed
        starts.setdefault(key, []).append(r["checkpoints"][0])
    assert len(starts[PolicyKind.MODULAR]) == sum(m.policy == PolicyKind.MODULAR for m in METHODS.values())
    for points in starts.values():
        assert all(p["outcomes"] == points[0]["outcomes"] for p in points)
        assert all(p["first_failed"] == points[0]["first_failed"] for p in points)
        assert sum(p["seconds"] > 0 for p in points) == 1  # evaluated once, read back by the others
    assert sorted(p.name for p in (config.output / "starts").iterdir()) == sorted(
        {m.policy for m in METHODS.values()}
    )


def _check_frame_budget(config, settings, result):
    """(f): each round's frame budget is demos_per_round bootstrap subtask demos' worth, and is reached."""
    bootstrap = EpisodeStore(config.run / "episodes").iter_meta(kind="demo", robot=ROBOT)
    worth = round(settings.demos_per_round * np.mean([m.length for m in bootstrap]))  # subtask demos only
    store = EpisodeStore(
        config.output / "runs" / result["method"] / ROBOT / f"seed{result['seed']}" / "episodes"
    )
    demos = sorted(
        (m for m in store.iter_meta(kind="demo") if "whole_task_slot" in m.metadata),
        key=lambda m: m.metadata["whole_task_slot"],
    )
    assert result["demos"] == len(demos) > 0
    for m in demos:  # round-robin over the training compositions, seeded, apart from evaluation seeds
        slot = m.metadata["whole_task_slot"]
        assert m.composition.name == settings.training[slot % len(settings.training)]
        assert m.seed == WHOLE_TASK_SEED_BASE + slot and m.seed not in result["eval_seeds"]
    allowed = 0
    for k, round_ in enumerate(result["rounds"]):
        mine = [m for m in demos if m.metadata["round"] == k]
        assert round_["frame_budget"] == worth and round_["demo_frames"] == sum(m.length for m in mine)
        allowed += worth
        used = result["checkpoints"][k + 1]["demo_frames"]
        assert allowed <= used < allowed + mine[-1].length  # reached; only the last demo overshoots
    for checkpoint in result["checkpoints"]:  # no policy for a held-out composition: failures, said so
        assert checkpoint["unsupported"] == list(settings.held_out)
        assert not any(o for name in settings.held_out for o in checkpoint["outcomes"][name])


def test_a_finished_experiment_is_read_back_not_rerun(experiment):
    config, result = experiment
    start = time.perf_counter()
    again = run_experiment(config)
    assert time.perf_counter() - start < 30  # only plots and the report are redone
    assert again["runs"] == json.loads(json.dumps(result["runs"]))  # as result.json holds them
    with pytest.raises(ValueError, match=r"other settings.*targeted_allocation"):  # not read back as theirs
        run_experiment(dataclasses.replace(config, allocation="proportional"))


def test_a_final_evaluation_on_more_states_extends_every_runs_first_and_last_checkpoints_once(experiment):
    config, result = experiment
    settings, _ = PROFILES["reduced"]
    with pytest.raises(ValueError, match="must exceed"):
        dataclasses.replace(config, final_rollouts=settings.eval_rollouts)
    more = dataclasses.replace(config, final_rollouts=settings.eval_rollouts + 2)
    first = run_experiment(more)
    seeds = evaluation_seeds(settings.eval_rollouts + 2)
    before = {(r["method"], r["seed"]): r for r in json.loads(json.dumps(result["runs"]))}
    for r in first["runs"]:
        curve = before[(r["method"], r["seed"])]
        assert {k: v for k, v in r.items() if k != "final"} == curve  # the curve and result stay as they were
        assert r["final"]["eval_seeds"] == seeds and r["final"]["seconds"] > 0
        for key, at in (("start", curve["checkpoints"][0]), ("checkpoint", curve["checkpoints"][-1])):
            point = r["final"][key]
            assert (point["versions"], point["demos"], point["unsupported"]) == (
                at["versions"], at["demos"], at["unsupported"],
            )  # fmt: skip
            for name, outcomes in point["outcomes"].items():  # the curve's states first, then the new ones
                assert (
                    len(outcomes) == len(seeds) and outcomes[: settings.eval_rollouts] == at["outcomes"][name]
                )
                assert len(point["first_failed"][name]) == len(point["timed_out"][name]) == len(seeds)
    for row in first["summary"]["table"]:
        assert row["final"]["eval_units"] == len(seeds) * len(settings.training)
        assert row["method"] == "robocoach" or "paired_vs_robocoach" in row["final"]
    assert "First and final checkpoints on 4 initial states" in (config.output / "report.md").read_text()
    assert (config.output / "final_success.png").exists()
    files = sorted((config.output / "runs").rglob("final_4.json"))
    assert len(files) == len(result["runs"])
    # each start evaluated once and shared, like the curve's budget 0
    assert sorted(p.parent for p in (config.output / "starts").rglob("final_4.json")) == sorted(
        p.parent for p in (config.output / "starts").rglob("round_0.json")
    )
    stamps = {p: p.stat().st_mtime_ns for p in (config.output).rglob("final_4*.json")}
    again = run_experiment(more)  # read back, not deployed again
    assert again["runs"] == json.loads(json.dumps(first["runs"]))
    assert {p: p.stat().st_mtime_ns for p in (config.output).rglob("final_4*.json")} == stamps


def test_fidelity_on_the_final_evaluation_pairs_each_runs_start_and_end_with_their_final_trials(experiment):
    config, _ = experiment
    settings, _ = PROFILES["reduced"]
    final = run_experiment(
        dataclasses.replace(config, final_rollouts=settings.eval_rollouts + 2)
    )  # read back
    modular = [r for r in final["runs"] if METHODS[r["method"]].policy == PolicyKind.MODULAR]
    fidelity = FidelityConfig(
        experiments=(config.output,), rollouts=2, final=True, out=config.output / "fid_f"
    )
    result = run_fidelity(fidelity)
    assert result["checkpoints"] == 1 + len(modular)  # the shared start once, then every run's end
    start = modular[0]["final"]["start"]
    for run in modular:
        end = run["final"]["checkpoint"]
        ended = f"{run['method']}/seed{run['seed']}@{end['demos']}"
        for label, point in ((ended, end), ("start", start)):
            rows = {r["composition"]: r for r in result["rows"] if r["policy"] == label}
            assert sorted(rows) == sorted(point["first_failed"])
            for name, row in rows.items():  # the final evaluation's trials, all of its states
                assert row["deployed_first_failed"] == point["first_failed"][name]
                assert len(row["deployed_first_failed"]) == settings.eval_rollouts + 2
    assert "as the final evaluation deployed them" in (fidelity.out_dir / "fidelity.md").read_text()
    with pytest.raises(ValueError, match="choose a fresh --out"):  # curve rows never mix with final ones
        run_fidelity(dataclasses.replace(fidelity, final=False))
    run = {**modular[0]}
    run.pop("final")
    with pytest.raises(ValueError, match="--final-rollouts"):
        checkpoints_to_imagine({"config": {"run": "x"}, "runs": [run]}, config.output, (), final=True)


def test_an_earlier_checkpoints_policy_loads_without_changing_which_adapters_are_active(experiment):
    config, result = experiment
    # a modular run that kept an update (the acceptance check may roll every update of a run back)
    run = next(
        r
        for r in result["runs"]
        if METHODS[r["method"]].policy == PolicyKind.MODULAR
        and r["checkpoints"][-1]["versions"] != r["checkpoints"][0]["versions"]
    )
    method = METHODS[run["method"]]
    experts = config.output / "runs" / method.name / ROBOT / f"seed{run['seed']}" / "experts"
    start, last = run["checkpoints"][0]["versions"], run["checkpoints"][-1]["versions"]
    trained = sorted(s for s in last if last[s] != start[s])
    registry = AdapterRegistry(experts / ADAPTERS_DIR)
    active = {s: registry.active_version(s) for s in registry.skills()}
    earlier, loaded = load_policy(experts, method, start)
    bootstrap, _, _, _ = load_experts(config.run / "experts")
    now, _ = load_policy(experts, method)
    assert loaded == start and {s: registry.active_version(s) for s in registry.skills()} == active == last
    mine, theirs, newest = earlier.state_dict(), bootstrap.state_dict(), now.state_dict()
    assert all(torch.equal(mine[k], theirs[k]) for k in theirs)  # budget 0 is the bootstrap, exactly
    assert any(not torch.equal(mine[k], newest[k]) for k in newest if f".{trained[0]}." in k)


def test_fidelity_imagines_every_modular_checkpoint_once_against_its_deployed_trials(experiment):
    config, result = experiment
    fidelity = FidelityConfig(experiments=(config.output,), rollouts=2)
    runs = {
        p: p.stat().st_mtime_ns for p in [*(config.output / "runs").rglob("*"), *config.run.rglob("ACTIVE")]
    }
    first = run_fidelity(fidelity)
    # reading the runs' and the bootstrap's experts writes nothing there (ACTIVE included)
    assert {p: p.stat().st_mtime_ns for p in runs} == runs
    settings, _ = PROFILES["reduced"]
    compositions = [*settings.training, *settings.held_out]
    modular = [r for r in result["runs"] if METHODS[r["method"]].policy == PolicyKind.MODULAR]
    rounds = settings.budget // settings.demos_per_round
    # the bootstrap (budget 0) once, then every modular run's coached checkpoints
    assert first["checkpoints"] == 1 + len(modular) * rounds
    assert len(first["rows"]) == first["checkpoints"] * len(compositions)
    for run in modular:
        for checkpoint in run["checkpoints"][1:]:
            label = f"{run['method']}/seed{run['seed']}@{checkpoint['demos']}"
            mine = {r["composition"]: r for r in first["rows"] if r["policy"] == label}
            assert sorted(mine) == sorted(compositions)
            for name, row in mine.items():
                assert row["deployed_first_failed"] == checkpoint["first_failed"][name]
                assert row["imagined_trials"] == 2 and row["demos"] == checkpoint["demos"]
    start = [r for r in first["rows"] if r["policy"] == "start"]
    assert len(start) == len(compositions) and all(r["demos"] == 0 for r in start)
    assert (fidelity.out_dir / "fidelity.md").exists() and (fidelity.out_dir / "fidelity.json").exists()
    # imagined checkpoints are kept: a second call reads them back and imagines nothing
    stamps = {p: p.stat().st_mtime_ns for p in (fidelity.out_dir / "rows").iterdir()}
    again = run_fidelity(fidelity)
    assert again["rows"] == first["rows"]
    assert {p: p.stat().st_mtime_ns for p in (fidelity.out_dir / "rows").iterdir()} == stamps
    with pytest.raises(ValueError, match="choose a fresh --out"):  # rows of other settings never mix
        run_fidelity(FidelityConfig(experiments=(config.output,), rollouts=3))
    with pytest.raises(ValueError, match="arms overlap"):  # pairs are named per arm: one experiment each
        run_fidelity(FidelityConfig(experiments=(config.output, config.output), out=fidelity.out_dir))
    with pytest.raises(ValueError, match="--out"):
        FidelityConfig(experiments=(config.output, config.output))


def test_a_fidelity_folder_takes_in_a_new_arm_but_never_another_setup_of_an_arm_it_holds(tmp_path):
    path = tmp_path / "imagination.json"
    franka, piper = {"world": "w1", "num_rollouts": 32}, {"world": "w2", "num_rollouts": 32}
    _claim(path, {"franka": franka})
    _claim(path, {"franka": franka, "piper": piper})  # piper joins; franka's rows stay valid
    assert json.loads(path.read_text()) == {"franka": franka, "piper": piper}
    with pytest.raises(ValueError, match="choose a fresh --out"):
        _claim(path, {"piper": {**piper, "num_rollouts": 8}})
    assert json.loads(path.read_text()) == {"franka": franka, "piper": piper}  # the refusal changed nothing


def test_fidelity_adds_calibrated_measures_where_the_inputs_hold_a_calibration(experiment):
    """Rows already imagined are calibrated at report time: nothing is imagined again for it."""
    config, _ = experiment
    calibration = ImaginationCalibration(
        {f"{ROBOT} press_button": {"deployed": [3, 4], "imagined": [1, 4]}}, source={"by": "hand"}
    )
    calibration.save(config.run / CALIBRATION_FILE)
    try:
        result = run_fidelity(FidelityConfig(experiments=(config.output,), rollouts=2))
    finally:
        (config.run / CALIBRATION_FILE).unlink()
    assert result["calibration"] == {ROBOT: calibration.to_dict()}
    for row in result["rows"]:
        skills = get_composition(ROBOT, row["composition"]).skills
        expected = calibration.success(ROBOT, skills, row["imagined_first_failed"])
        assert row["calibrated_success"] == (pytest.approx(expected) if row["imagined_valid"] else None)
    report = (config.output / "fidelity" / "fidelity.md").read_text()
    assert "Calibrated measures" in report and CALIBRATION_FILE in report
    # the diagnosis of each checkpoint's training compositions, raw and calibrated, against deployment's
    assert {d["policy"] for d in result["diagnosis"]} == {r["policy"] for r in result["rows"]}
    assert all({"raw", "calibrated"} <= set(d) for d in result["diagnosis"])
    assert "Diagnosis vs deployment" in report
