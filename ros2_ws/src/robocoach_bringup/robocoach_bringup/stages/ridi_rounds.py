"""Stage 4 of the main job: RIDI rounds through the real ROS 2 graph, one arm after the other.

The graph is the one the launch files start (`graph.describe_graph`, backend "sim"): sim robot,
executor, world model, judge, scripted operator and coach, each its own process exchanging
robocoach_msgs over DDS. The coach runs its rounds and exits when the budget is spent; the stage
then reads what it did from the coach's state file (the same file a restarted coach resumes from),
and the report shows each arm's last operator scorecard from the coach's round folder, its imagined
failure clips linked where the coach wrote them.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import rclpy
from tqdm import tqdm

from robocoach_bringup.graph import GraphConfig, RunPaths, describe_graph
from robocoach_bringup.processes import running_nodes
from robocoach_world.coach.plots import plot_allocation_per_round
from robocoach_world.coach.scorecard import SCORECARD_JSON, scorecard_markdown
from robocoach_world.coach.state import ROUND_DIR
from robocoach_world.nodes.coach import STATE_FILE

POLL_S = 2.0  # how often the stage looks at the coach's state file


def coach_state_dir(output: Path, robot: str) -> Path:
    return RunPaths(output).coach / robot


def coached_experts_dir(output: Path, robot: str) -> Path:
    """Each arm is coached on its own copy of the bootstrap experts (its own adapter lineage), as
    the paper coaches each robot separately; the bootstrap experts stay untouched for reference."""
    return RunPaths(output).coach / robot / "experts"


def run(config, results: dict) -> dict:
    profile = config.profile
    summaries, plots = {}, []
    for robot in config.robots:
        state_dir = coach_state_dir(config.output, robot)
        experts = coached_experts_dir(config.output, robot)
        if not experts.exists():  # a resumed run keeps the adapters coached so far
            shutil.copytree(RunPaths(config.output).experts, experts)
        overrides = {
            "coach": {
                "state_dir": str(state_dir),
                "budget": profile.demo_budget,
                "demos_per_round": profile.demos_per_round,
                "num_rollouts": profile.imagined_rollouts,
                "initial_states": profile.initial_states,
                "horizon": profile.horizon,
                "train_steps": profile.adapter_steps,
                "dense_steps": profile.dense_steps,
                "exit_when_done": True,
            },
        }
        graph = GraphConfig(
            robot=robot, backend="sim", run_dir=config.output, experts_dir=experts, overrides=overrides
        )
        specs = describe_graph(graph)
        history = _run_graph(
            specs, state_dir / STATE_FILE, config.output / "logs" / robot, profile.demo_budget
        )
        summaries[robot] = history
        allocation = [
            {d["pair"]: d["n_demos"] for d in entry["allocation"].get("demos", [])} for entry in history
        ]
        plots.append(plot_allocation_per_round(allocation, config.output / f"allocation_{robot}.png").name)
    return {
        "history": summaries,
        "plots": plots,
        "markdown": _markdown(summaries, plots, config.output),
    }


def _run_graph(specs, state_file: Path, log_dir: Path, budget: int) -> list[dict]:
    """Start the graph, wait for the coach to exit, and return the rounds it closed."""
    context = rclpy.context.Context()
    rclpy.init(context=context)
    probe = rclpy.create_node("robocoach_demo", context=context)
    try:
        with running_nodes(specs, log_dir, probe.get_node_names) as nodes:
            coach = nodes["coach"]
            bar = tqdm(total=budget, desc=f"coach demos ({state_file.parent.name})", unit="demo")
            while coach.alive():
                for name, node in nodes.items():
                    if name != "coach" and not node.alive():
                        raise RuntimeError(
                            f"node {name} died during coaching; its log:\n{node.log()[-4000:]}"
                        )
                spent = _read_state(state_file).get("demos_spent", 0)
                bar.update(spent - bar.n)
                time.sleep(POLL_S)
            bar.close()
            state = _read_state(state_file)
            if state.get("demos_spent", 0) < budget and state.get("round", 0) == 0:
                raise RuntimeError(
                    f"the coach stopped before finishing a round; its log:\n{coach.log()[-4000:]}"
                )
            return state["history"]
    finally:
        probe.destroy_node()
        rclpy.try_shutdown(context=context)


def _read_state(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):  # not written yet
        return {}


def _markdown(summaries: dict[str, list[dict]], plots: list[str], output: Path) -> str:
    lines = [
        "| robot | round | demos requested (pair: n) | imagined success per composition |",
        "|---|---|---|---|",
    ]
    for robot, history in summaries.items():
        for entry in history:
            demos = (
                ", ".join(f"{d['pair']}: {d['n_demos']}" for d in entry["allocation"].get("demos", []))
                or "none"
            )
            compositions = entry["summary"].get("diagnosis", {}).get("compositions", [])
            imagined = ", ".join(
                f"{c['composition']} {c['success_rate']:.0%}"
                for c in compositions
                if c["success_rate"] is not None
            )
            lines.append(f"| {robot} | {entry['round']} | {demos} | {imagined} |")
    lines += ["", " ".join(f"![demo allocation]({p})" for p in plots)]
    for robot, history in summaries.items():  # what the operator saw before the last round's demos
        if history:
            lines += ["", f"### Operator scorecard, {robot}, round {history[-1]['round']}", ""]
            lines.append(scorecard_section(output, robot, history[-1]["round"]))
    return "\n".join(lines)


def scorecard_section(output: Path, robot: str, round_index: int) -> str:
    """The coach's scorecard of one round as markdown for a report in `output`: clip links lead
    from there to the PNGs in the coach's round folder."""
    folder = coach_state_dir(output, robot) / ROUND_DIR.format(round=round_index)
    data = json.loads((folder / SCORECARD_JSON).read_text())
    return scorecard_markdown(data, link_base=f"{folder.relative_to(output).as_posix()}/")
