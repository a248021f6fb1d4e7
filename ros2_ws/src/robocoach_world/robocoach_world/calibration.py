"""Per-skill calibration of imagined outcomes: how much more (or less) often each skill completes deployed
than in imagination, measured once on real rollouts and their imagined twins, then applied to any pair.

CoachWorld and the judge on its frames are biased per skill and in both directions (session 44, on
Franka: imagination completes picks 3% of the time where deployment does 19%, pushes 49% against 10%).
A pair's imagined success multiplies its subtasks' rates, so the bias of each skill moves every
composition that uses it, and pairs rank by which skills they hold rather than by how well they do.

The calibration is fitted once per (run, arm), from bootstrap-expert rollouts that no model trained on
(the offboard stage's calibration rollouts, scored by the simulator) and their imagined twins (the same
experts imagined from each rollout's first frame, judged as imagination always is). Per "<robot> <skill>":

    shift = logit(deployed completed / reached) - logit(imagined completed / reached)

each rate with `pseudo_trials` Beta pseudo-counts at 1/2; 0 where either side never reached the skill.
Applied to a pair's valid imagined trials, each subtask's completion where reached is shrunk toward the
skill's imagined rate on the calibration set (by `pseudo_trials` trials), shifted, and the subtasks
multiplied: the calibrated success, and the expected share of subtasks done before the first failure
(calibrated completion). A skill the calibration never saw keeps its imagined rate (shift 0).

    calibration = ImaginationCalibration(per_skill(rows))      # rows: fidelity.pair_row of the twins
    calibration.success("franka", ["pick", "place"], imagined_first_failed=[-1, 0, 1, 1])
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robocoach_skills.checkpoint import json_bytes, replace_file_atomically

CALIBRATION_FILE = "imagination_calibration.json"  # in a run folder, beside experts/, world/, judge/
SIDES = ("deployed", "imagined")


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


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

    def _rate(self, skill: str, side: str) -> float:
        completed, reached = self.per_skill[skill][side]
        return (completed + self.pseudo_trials / 2) / (reached + self.pseudo_trials)

    def shift(self, robot: str, skill: str) -> float:
        """Log-odds added to the skill's imagined completion rate; 0 for a skill never calibrated."""
        return self._shift(f"{robot} {skill}")

    def _shift(self, key: str) -> float:
        """0 where either side never reached the skill: nothing says which way imagination errs."""
        if key not in self.per_skill or not all(self.per_skill[key][side][1] for side in SIDES):
            return 0.0
        return _logit(self._rate(key, "deployed")) - _logit(self._rate(key, "imagined"))

    def subtask_rates(
        self, robot: str, skills: Sequence[str], imagined_first_failed: Sequence[int]
    ) -> list[float]:
        """Calibrated completion rate where reached of each subtask (position) of one pair."""
        failed = np.asarray(imagined_first_failed, dtype=int)
        rates = []
        for i, skill in enumerate(skills):
            reached = int(np.sum((failed < 0) | (failed >= i)))
            completed = int(np.sum((failed < 0) | (failed > i)))
            key = f"{robot} {skill}"
            prior = self._rate(key, "imagined") if key in self.per_skill else 0.5
            imagined = (completed + self.pseudo_trials * prior) / (reached + self.pseudo_trials)
            rates.append(_sigmoid(_logit(imagined) + self._shift(key)))
        return rates

    def success(self, robot: str, skills: Sequence[str], imagined_first_failed: Sequence[int]) -> float:
        """Calibrated success of a pair: its subtasks' calibrated rates multiplied."""
        return float(np.prod(self.subtask_rates(robot, skills, imagined_first_failed)))

    def completion(self, robot: str, skills: Sequence[str], imagined_first_failed: Sequence[int]) -> float:
        """Calibrated subtask completion: the expected share of subtasks done before the first failure."""
        reached_and_done = np.cumprod(self.subtask_rates(robot, skills, imagined_first_failed))
        return float(reached_and_done.sum() / len(skills))

    def describe(self) -> list[str]:
        """One line per skill: completed where reached on both sides, and the shift they give."""
        return [
            f"{key}: deployed {d[0]}/{d[1]}, imagined {i[0]}/{i[1]}, shift {self._shift(key):+.2f}"
            for key, d, i in ((k, v["deployed"], v["imagined"]) for k, v in self.per_skill.items())
        ]

    def to_dict(self) -> dict:
        return {
            "pseudo_trials": self.pseudo_trials,
            "per_skill": {k: {side: list(v[side]) for side in SIDES} for k, v in self.per_skill.items()},
            "shift": {k: self._shift(k) for k in self.per_skill},
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
