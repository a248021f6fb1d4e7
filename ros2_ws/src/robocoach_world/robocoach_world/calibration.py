"""Per-skill calibration of imagined outcomes: how much more (or less) often each skill completes deployed
than in imagination, measured once on real rollouts and their imagined twins, then applied to any pair.

CoachWorld and the judge on its frames are biased per skill and in both directions (session 44, on
Franka: imagination completes picks 3% of the time where deployment does 19%, pushes 49% against 10%).
A pair's imagined success multiplies its subtasks' rates, so the bias of each skill moves every
composition that uses it, and pairs rank by which skills they hold rather than by how well they do.

The calibration is fitted once per (run, arm), from bootstrap-expert rollouts that no model trained on
(the offboard stage's calibration rollouts, scored by the simulator) and their imagined twins (the same
experts imagined from each rollout's first frame, judged as imagination always is). Per "<robot> <skill>"
it keeps completed / reached on both sides, each rate q with `pseudo_trials` Beta pseudo-counts at 1/2,
and maps an imagined rate p to a deployed one through (q_imagined, q_deployed) by scaling:

    optimistic skill (q_deployed <= q_imagined):  p * q_deployed / q_imagined         (successes scale)
    pessimistic skill:                            1 - (1 - p) * (1 - q_deployed) / (1 - q_imagined)

Not a shift in log-odds: imagination can saturate (the Franka drawer opened in 80 of 80 twins, 13 of 40
deployed), and a log-odds shift fitted there sends a pair's 20 of 20 to 0.85 while the calibration's own
80 of 80 goes to 0.33; the scaling sends both near 0.33. A skill either side never reached keeps its
imagined rate. Applied to a pair's valid imagined trials, each subtask's completion where reached is
shrunk toward the skill's imagined rate on the calibration set (by `pseudo_trials` trials), mapped, and
the subtasks multiplied: the calibrated success, and the expected share of subtasks done before the first
failure (calibrated completion).

    calibration = ImaginationCalibration(per_skill(rows))      # rows: fidelity.pair_row of the twins
    calibration.success("franka", ["pick", "place"], imagined_first_failed=[-1, 0, 1, 1])

The coach's diagnosis weighs pairs by `first_timeouts` when it has a calibration (coach.diagnosis).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robocoach_skills.checkpoint import json_bytes, replace_file_atomically

CALIBRATION_FILE = "imagination_calibration.json"  # in a run folder, beside experts/, world/, judge/
SIDES = ("deployed", "imagined")


@dataclass(frozen=True)
class ImaginationCalibration:
    """Per "<robot> <skill>": {"deployed": [completed, reached], "imagined": [completed, reached]}."""

    per_skill: Mapping[str, Mapping[str, Sequence[int]]]
    pseudo_trials: float = 2.0  # Beta pseudo-counts on every rate (half completed)
    source: dict = field(default_factory=dict)  # what it was fitted on (paths, trials), for the record

    def __post_init__(self) -> None:
        if self.pseudo_trials <= 0:
            raise ValueError(f"pseudo_trials must be > 0, got {self.pseudo_trials!r}")
        for skill, sides in self.per_skill.items():
            for side in SIDES:
                counts = list(sides[side]) if side in sides else []
                if len(counts) != 2 or not 0 <= counts[0] <= counts[1]:
                    raise ValueError(
                        f"calibration of {skill!r}: {side} needs [completed, reached], got {sides!r}"
                    )

    def _rate(self, key: str, side: str) -> float:
        completed, reached = self.per_skill[key][side]
        return (completed + self.pseudo_trials / 2) / (reached + self.pseudo_trials)

    def anchors(self, robot: str, skill: str) -> tuple[float, float] | None:
        """(q_imagined, q_deployed) the skill's map goes through; None (identity) where either side never
        reached it."""
        key = f"{robot} {skill}"
        if key not in self.per_skill or not all(self.per_skill[key][side][1] for side in SIDES):
            return None
        return self._rate(key, "imagined"), self._rate(key, "deployed")

    def adjust(self, robot: str, skill: str, imagined: float) -> float:
        """The deployed rate an imagined completion rate of `skill` stands for."""
        anchors = self.anchors(robot, skill)
        if anchors is None:
            return imagined
        q_imagined, q_deployed = anchors
        if q_deployed <= q_imagined:
            return imagined * q_deployed / q_imagined
        return 1.0 - (1.0 - imagined) * (1.0 - q_deployed) / (1.0 - q_imagined)

    def subtask_rates(
        self, robot: str, skills: Sequence[str], imagined_first_failed: Sequence[int]
    ) -> list[float]:
        """Calibrated completion rate where reached of each subtask (position) of one pair."""
        failed = np.asarray(imagined_first_failed, dtype=int)
        rates = []
        for i, skill in enumerate(skills):
            reached = int(np.sum((failed < 0) | (failed >= i)))
            completed = int(np.sum((failed < 0) | (failed > i)))
            anchors = self.anchors(robot, skill)
            prior = anchors[0] if anchors else 0.5
            imagined = (completed + self.pseudo_trials * prior) / (reached + self.pseudo_trials)
            rates.append(self.adjust(robot, skill, imagined))
        return rates

    def success(self, robot: str, skills: Sequence[str], imagined_first_failed: Sequence[int]) -> float:
        """Calibrated success of a pair: its subtasks' calibrated rates multiplied."""
        return float(np.prod(self.subtask_rates(robot, skills, imagined_first_failed)))

    def completion(self, robot: str, skills: Sequence[str], imagined_first_failed: Sequence[int]) -> float:
        """Calibrated subtask completion: the expected share of subtasks done before the first failure."""
        reached_and_done = np.cumprod(self.subtask_rates(robot, skills, imagined_first_failed))
        return float(reached_and_done.sum() / len(skills))

    def first_timeouts(
        self, robot: str, skills: Sequence[str], imagined_first_failed: Sequence[int]
    ) -> list[float]:
        """Calibrated share of trials whose first timeout is at each subtask (what diagnosis weighs):
        every subtask before it done, it not."""
        rates = self.subtask_rates(robot, skills, imagined_first_failed)
        reached = np.concatenate([[1.0], np.cumprod(rates)[:-1]])
        return [float(r * (1.0 - q)) for r, q in zip(reached, rates, strict=True)]

    def describe(self) -> list[str]:
        """One line per skill: completed where reached on both sides, and the map they give."""
        lines = []
        for key, sides in self.per_skill.items():
            (dc, dr), (ic, ir) = sides["deployed"], sides["imagined"]
            anchors = self.anchors(*key.split(" ", 1))
            mapped = (
                "kept as imagined" if anchors is None else f"imagined {anchors[0]:.2f} -> {anchors[1]:.2f}"
            )
            lines.append(f"{key}: deployed {dc}/{dr}, imagined {ic}/{ir}: {mapped}")
        return lines

    def to_dict(self) -> dict:
        return {
            "pseudo_trials": self.pseudo_trials,
            "per_skill": {k: {side: list(v[side]) for side in SIDES} for k, v in self.per_skill.items()},
            # (q_imagined, q_deployed) per skill, null where kept as imagined
            "anchors": {k: self.anchors(*k.split(" ", 1)) for k in self.per_skill},
            "source": self.source,
        }

    def save(self, path: Path) -> None:
        replace_file_atomically(Path(path), json_bytes(self.to_dict()))

    @classmethod
    def load(cls, path: Path) -> ImaginationCalibration:
        """Raises ValueError naming the file when it is not a calibration this code wrote."""
        try:
            data = json.loads(Path(path).read_text())
            return cls(
                {
                    k: {side: [int(n) for n in v[side]] for side in SIDES}
                    for k, v in data["per_skill"].items()
                },
                float(data["pseudo_trials"]),
                dict(data.get("source", {})),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{path}: not a readable imagination calibration ({e})") from e
