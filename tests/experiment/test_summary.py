"""The comparison's numbers from hand-made run results: several seeds per method, worked out by hand."""

from __future__ import annotations

import pytest

from robocoach_skills.measures import wilson_interval
from robocoach_world.experiment.summary import markdown, summarize

T, F = True, False


def _run(
    method: str,
    seed: int,
    training: list[list[bool]],
    held_out: list[list[bool]],
    first_failed: list[list[int]] | None = None,
    allocations: list[list[dict]] | None = None,
) -> dict:
    """One run: per checkpoint, the outcomes of composition "a" (training) and "h" (held-out).

    Unless given, a failed trial of "a" failed first at its first subtask, and every round's 2 demos
    showed it; `first_failed` lists "a"'s first failed subtask per checkpoint and state (-1: success).
    """
    first_failed = first_failed or [[-1 if ok else 0 for ok in a] for a in training]
    allocations = allocations or [[{"pair": "franka:pick(cube)", "n_demos": 2}]] * (len(training) - 1)
    return {
        "method": method,
        "robot": "franka",
        "seed": seed,
        "demos": 4,
        "demo_frames": 40 + seed,
        "training": ["a"],
        "held_out": ["h"],
        "subtasks": {"a": ["pick(cube)", "press(button)"], "h": ["push(cube)"]},
        "settings": {"demos_per_round": 2, "budget": 4},
        "checkpoints": [
            {"outcomes": {"a": a, "h": h}, "first_failed": {"a": ff, "h": [-1 if ok else 0 for ok in h]}}
            for a, h, ff in zip(training, held_out, first_failed, strict=True)
        ],
        "rounds": [{"allocation": allocation} for allocation in allocations],
    }


def test_several_seeds_give_a_mean_a_std_an_auc_each_and_a_test_paired_by_seed_and_state():
    held = [[F], [F], [T]]
    results = [
        _run("robocoach", 0, [[F, F], [T, F], [T, T]], held),
        _run("robocoach", 1, [[F, F], [F, F], [T, F]], held),
        _run("modular_uniform", 0, [[F, F], [F, F], [T, F]], held),
        _run("modular_uniform", 1, [[F, F], [F, F], [F, F]], held),
    ]
    rows = {r["method"]: r for r in summarize(results)["table"]}
    coach = rows["robocoach"]
    assert coach["seeds"] == [0, 1] and coach["budgets"] == [0, 2, 4]
    assert coach["training_success_per_seed"] == [[0, 0.5, 1], [0, 0, 0.5]]
    assert coach["training_success_mean"] == pytest.approx([0, 0.25, 0.75])
    assert coach["training_success_std"] == pytest.approx([0, 0.25, 0.25])
    # (S0 + 2 S1 + S2) / 4 per seed; pooled over both seeds: (0 + 2 x 0.25 + 0.75) / 4
    assert coach["budget_auc_per_seed"] == pytest.approx([0.5, 0.125])
    assert coach["budget_auc"] == pytest.approx(0.3125) and coach["eval_units"] == 4
    assert coach["held_out_success"] == pytest.approx([0, 0, 1])
    # final training outcomes paired by (seed, state): robocoach alone succeeds in 2 of 4, uniform in none
    test = rows["modular_uniform"]["paired_vs_robocoach"]["training"]
    assert (test["pairs"], test["only_robocoach"], test["only_baseline"]) == (4, 2, 0)
    assert test["p_value"] == pytest.approx(0.5)  # exact two-sided: 2 x 0.5^2


def test_each_row_says_where_trials_failed_first_and_what_each_rounds_demos_showed():
    held = [[F], [F], [T]]
    coached = [[F, F], [F, T], [T, T]]
    first = [[0, 1], [1, -1], [-1, -1]]  # pick and press fail, then only press, then nothing
    allocations = [
        [{"pair": "franka:pick(cube)", "n_demos": 1}, {"pair": "franka:press(button)", "n_demos": 1}],
        [{"pair": "franka:press(button)", "n_demos": 2}],
    ]
    results = [
        _run("robocoach", 0, coached, held, first, allocations),
        _run("robocoach", 1, coached, held, first, allocations),
        _run("modular_uniform", 0, [[F, F]] * 3, held),
    ]
    summary = summarize(results)
    rows = {r["method"]: r for r in summary["table"]}
    coach = rows["robocoach"]  # two seeds summed; the held-out push fails first at budgets 0 and 2
    assert coach["first_failures"] == [
        {"pick(cube)": 2, "press(button)": 2, "push(cube)": 2},
        {"press(button)": 2, "push(cube)": 2},
        {},
    ]
    assert coach["round_demos"] == [{"pick(cube)": 2, "press(button)": 2}, {"press(button)": 4}]
    assert rows["modular_uniform"]["first_failures"][-1] == {"pick(cube)": 2}
    table = markdown(summary, [])
    assert "| press(button) | 2 / 2 / 0 | 2 / 4 | 0 / 0 / 0 | 0 / 0 |" in table
    assert "| pick(cube) | 2 / 0 / 0 | 2 / 0 | 2 / 2 / 2 | 2 / 2 |" in table


def test_first_failures_leave_out_compositions_a_method_has_no_policy_for():
    run = _run(
        "end_to_end", 0, [[F, F], [F, F]], [[F], [F]], allocations=[[{"composition": "a", "n_demos": 1}]]
    )
    for point in run["checkpoints"]:
        point["unsupported"] = ["h"]
    (row,) = summarize([run])["table"]
    assert row["first_failures"] == [{"pick(cube)": 2}, {"pick(cube)": 2}]
    assert row["round_demos"] == [{"whole task a": 1}]


def test_failed_trials_are_split_by_whether_the_expert_timed_out_or_the_judge_ended_a_subtask_wrongly():
    first = [[0, 1], [1, -1]]  # "a" has two subtasks; the held-out "h" fails first at 0 while failing
    run = _run("robocoach", 0, [[F, F], [F, T]], [[F], [F]], first)
    # checkpoint 0: timed out at 0 (the expert's), confirmed subtask 1 early (no timeout); checkpoint 1:
    # timed out at 0 although 0 completed (the judge missed it); held-out trials timed out where they failed
    for point, timed_out in zip(run["checkpoints"], [[0, -1], [0, -1]], strict=True):
        point["timed_out"] = {"a": timed_out, "h": [0]}
    (row,) = summarize([run])["table"]
    assert row["failure_endings"] == [
        {"deadline": 2, "judge_early": 1, "judge_missed": 0},
        {"deadline": 1, "judge_early": 0, "judge_missed": 1},
    ]
    # The judge called a trial failed where it timed out: checkpoint 0 catches 2 of 3 failures (F1 0.8);
    # at checkpoint 1 it catches h's, and a's miss is its own failure call, wrong (precision 1/2, F1 2/3).
    # Its verdict names the simulator's first failure (or success) in 2 of 3 trials at both checkpoints.
    assert row["judge_f1"] == [pytest.approx(0.8), pytest.approx(2 / 3)]
    assert row["judge_agreement"] == [pytest.approx(2 / 3)] * 2
    assert "- (d) robocoach: 2 / 1; 1 / 0; 0 / 1; F1 80% / 67%; agreement 67% / 67%" in markdown(
        summarize([run]), []
    )
    del run["checkpoints"][1]["timed_out"]  # evaluated before timeouts were recorded: no split, no line
    (row,) = summarize([run])["table"]
    assert row["judge_f1"][1] is None and row["judge_agreement"][1] is None
    assert row["failure_endings"][1] is None and "How those failed trials ended" not in markdown(
        summarize([run]), []
    )


def _with_final(run: dict, training: list[bool], held_out: list[bool]) -> dict:
    """`run` with a final evaluation on more states (`runner.final_evaluation`'s shape). A failed trial
    of "a" failed at its second subtask (press) at the end, at its first (pick) at the start."""

    def point(a: list[bool], h: list[bool], failed_at: int) -> dict:
        first = {"a": [-1 if ok else failed_at for ok in a], "h": [-1 if ok else 0 for ok in h]}
        return {"outcomes": {"a": a, "h": h}, "first_failed": first}

    start = point([False] * (len(training) - 1) + [True], [False] * len(held_out), 0)
    final = {
        "eval_seeds": list(range(len(training))),
        "seconds": 1.0,
        "start": start,
        "checkpoint": point(training, held_out, 1),
    }
    return {**run, "final": final}


def test_the_final_evaluation_on_more_states_gets_its_own_rates_intervals_and_paired_tests():
    curve, held = [[F, F], [T, F]], [[F], [F]]
    results = [
        _with_final(_run("robocoach", 0, curve, held), [T, F, T, T], [T, F]),
        _with_final(_run("robocoach", 1, curve, held), [T, F, F, F], [F, F]),
        _with_final(_run("modular_uniform", 0, curve, held), [F, F, T, F], [F, F]),
        _with_final(_run("modular_uniform", 1, curve, held), [F, F, F, F], [F, T]),
        _run("modular_random", 0, curve, held),  # no final evaluation: no final row, no final test
        _with_final(_run("shared_uniform", 0, curve, held), [F, F, F, F], [F, F]),
        _with_final(_run("shared_uniform", 1, curve, held), [F, F, F, F], [F, F]),
    ]
    summary = summarize(results)
    rows = {r["method"]: r for r in summary["table"]}
    coach, uniform = rows["robocoach"]["final"], rows["modular_uniform"]["final"]
    assert coach["eval_rollouts"] == 4 and coach["eval_units"] == 8
    assert coach["training_success_per_seed"] == [0.75, 0.25] and coach["training_success_mean"] == 0.5
    assert coach["training_wilson"] == pytest.approx(wilson_interval(4, 8))
    assert coach["held_out_success"] == 0.25 and uniform["training_success_mean"] == 0.125
    # both seeds start from the bootstrap experts: one evaluation of 4 states, not 8 units
    assert coach["start_success"] == 0.25 and coach["start_wilson"] == pytest.approx(wilson_interval(1, 4))
    # paired by (seed, state): robocoach alone at seed 0's states 0, 3 and seed 1's state 0; uniform never
    test = uniform["paired_vs_robocoach"]["training"]
    assert (test["pairs"], test["only_robocoach"], test["only_baseline"]) == (8, 3, 0)
    assert test["p_value"] == pytest.approx(0.25)  # exact two-sided: 2 x 0.5^3
    held_test = uniform["paired_vs_robocoach"]["held_out"]
    assert (held_test["only_robocoach"], held_test["only_baseline"]) == (1, 1)
    # the curve's last checkpoint is tested as before: both methods identical there
    assert rows["modular_uniform"]["paired_vs_robocoach"]["training"]["only_robocoach"] == 0
    assert "final" not in rows["modular_random"]
    # subtasks, deployed: at the start one of 4 trials picks (and presses); at the end every trial picks
    assert coach["subtask_start"] == {"pick(cube)": [1, 4], "press(button)": [1, 1]}
    assert coach["subtask_final"] == {"pick(cube)": [8, 8], "press(button)": [4, 8]}
    shared = rows["shared_uniform"]["final"]  # a shared adapter is fitted per seed: two starts, 8 units
    assert shared["start_success"] == 0.25 and shared["start_wilson"] == pytest.approx(wilson_interval(2, 8))
    table = markdown(summary, [])
    assert "First and final checkpoints on 4 initial states per composition" in table
    assert (
        "| (e) modular_uniform | franka | 25% [" in table
        and "] | 12% ± 12% [" in table
        and "3 vs 0 of 8, p = 0.25" in table
    )
    pick, press = (
        next(line for line in table.splitlines() if line.startswith(f"| {s} | "))
        for s in ("pick(cube)", "press(button)")
    )
    assert (
        "| 1/4 (25%) -> 8/8 (100%) |" in pick and "| 1/1 (100%) -> 4/8 (50%) |" in press
    )  # robocoach's cells


def test_seeds_finally_evaluated_on_different_state_counts_are_an_error():
    curve, held = [[F, F], [T, F]], [[F], [F]]
    results = [
        _with_final(_run("robocoach", 0, curve, held), [T, F, T, T], [T, F]),
        _with_final(_run("robocoach", 1, curve, held), [T, F, F], [F, F]),
    ]
    with pytest.raises(ValueError, match="different numbers of states"):
        summarize(results)


def test_compute_is_summed_per_method_and_phase_over_seeds_when_every_seed_was_timed():
    curve, held = [[F, F], [T, F]], [[F], [F]]
    timed = {"imagine": 10.0, "collect": 5.0, "improve": 20.0, "evaluate": 40.0}
    results = [
        {**_run("robocoach", 0, curve, held), "phase_seconds": timed},
        {**_run("robocoach", 1, curve, held), "phase_seconds": {**timed, "imagine": 30.0}},
        {**_run("modular_uniform", 0, curve, held), "phase_seconds": timed},
        _run("modular_uniform", 1, curve, held),  # finished before phases were timed
    ]
    summary = summarize(results)
    rows = {r["method"]: r for r in summary["table"]}
    assert rows["robocoach"]["phase_seconds"] == {"imagine": 40, "collect": 10, "improve": 40, "evaluate": 80}
    assert "phase_seconds" not in rows["modular_uniform"]  # a partial sum would mislead
    assert "| (d) robocoach | franka | 40 | 10 | 40 | 80 |" in markdown(summary, [])
