"""The done rule, deadlines, first failure and the judge measures, on hand-made progress traces.

A `PixelJudge` reads its "progress" off each frame (the red value of pixel (0, 0) / 255), so every
trace here is exactly the one written in the test, and the expected verdicts are hand-computed.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

import numpy as np
import pytest
import torch
from torch import nn

import robocoach_world.judge.detector  # noqa: F401  (registers the "judge" detector)
from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.constants import OBS_IMAGE
from robocoach_skills.router import Router, RouterConfig
from robocoach_world.judge.evaluate import (
    calibrate,
    calibrate_steps,
    calibrate_threshold,
    completion_frames,
    evaluate_judge,
    format_table,
    score_case,
)
from robocoach_world.judge.model import JudgeConfig, ProgressJudge
from robocoach_world.judge.verdict import (
    NEVER,
    BatchedJudge,
    Deadlines,
    DoneRule,
    VerdictConfig,
    VideoClip,
    calibrate_deadlines,
    judge_episode,
)

SIZE = 16
FPS = 10.0
TWO = Composition(
    "two_buttons", "franka", (Subtask("press_button", "red_button"), Subtask("press_button", "green_button"))
)
LOOSE = Deadlines({"franka": {"press_button": 100}})


class _PixelEncoder(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(images.shape[0], self.dim)
        out[:, 0] = images[:, 0, 0, 0].float() / 255.0
        return out


class PixelJudge(ProgressJudge):
    """Judged progress and done score = red value of pixel (0, 0) / 255, whatever the history (it reads
    frames only: the verdict logic under test does not depend on the hand)."""

    def __init__(self) -> None:
        super().__init__(
            JudgeConfig(
                image_size=SIZE,
                channels=(8,),
                feature_dim=4,
                embed_dim=2,
                hidden_dim=4,
                hand=False,
                hand_skills=(),
            )
        )
        self.encoder = _PixelEncoder(self.config.feature_dim)

    def step(self, features, start, cond, hidden):
        logit = torch.logit(features[..., 0].clamp(1e-6, 1 - 1e-6))
        return torch.stack([logit, logit], dim=-1), hidden


def frames_for(trace: list[float]) -> np.ndarray:
    images = np.zeros((len(trace), SIZE, SIZE, 3), dtype=np.uint8)
    images[:, 0, 0, 0] = np.round(np.asarray(trace) * 255).astype(np.uint8)
    return images


@dataclass
class Labelled:
    images: np.ndarray
    composition: Composition
    fps: float
    subtask_index: np.ndarray
    progress: np.ndarray
    success: bool
    kind: str = "rollout"


def test_done_rule_needs_consecutive_steps_and_resets_per_row():
    rule = DoneRule(VerdictConfig(threshold=0.8, consecutive=3), rows=2)
    done = [rule.update(np.array([p, 0.9])).tolist() for p in (0.9, 0.9, 0.5, 0.9)]
    assert done == [[False, False], [False, False], [False, True], [False, True]]
    rule.reset_rows([1])
    assert rule.update(np.array([0.9, 0.9])).tolist() == [False, False]
    with pytest.raises(ValueError, match="threshold"):
        VerdictConfig(threshold=1.0)


PICK_PLACE = Composition(
    "pick_place_bin", "franka", (Subtask("pick", "red_cube"), Subtask("place", "red_cube", "bin"))
)


def test_a_grasp_counts_as_done_only_while_the_gripper_holds_something_and_a_place_once_it_let_go():
    config = VerdictConfig()  # holding (0.2, 0.7): Franka holds a cube at 0.45, closed on nothing at 0
    skills = ["pick", "pick", "pick", "press_button"]
    assert config.may_finish(skills, np.array([0.0, 0.45, 0.9, 0.0])).tolist() == [False, True, False, True]
    assert config.may_finish(skills, None).tolist() == [True] * 4  # bare frames: nothing to check
    # ... and only while the fingers read wider than commanded (something keeps them open): fingers
    # that read what they were told, pre-shaped or opening again after a miss, hold nothing
    reading, command = np.array([0.45, 0.45, 0.3, 0.45]), np.array([0.0, 0.45, 1.0, 1.0])
    assert config.may_finish(skills, reading, command).tolist() == [True, False, False, True]
    with pytest.raises(ValueError, match="held_open"):
        VerdictConfig(held_open=-0.1)
    # a place counts as done only once the fingers read wider than any held cube: they let go
    places = ["place"] * 4
    assert config.may_finish(places, np.array([0.45, 0.58, 0.75, 1.0])).tolist() == [False, False, True, True]
    assert VerdictConfig(release_skills=()).may_finish(places, np.array([0.45] * 4)).all()
    # the rule that deadlines keep as JSON comes back the same
    assert VerdictConfig(**json.loads(json.dumps(asdict(config)))) == config
    with pytest.raises(ValueError, match="holding"):
        VerdictConfig(holding=(0.7, 0.2))
    # the judge calls the pick done from frame 1 on; the fingers close on nothing (0) until frame 3,
    # then hold the cube (0.45): the pick ends at frame 4, the second step both say so
    trace = [0.1, 0.95, 0.95, 0.95, 0.95, 0.1, 0.1]
    gripper = np.array([1.0, 0.0, 0.0, 0.45, 0.45, 0.45, 0.45], dtype=np.float32)
    proprio = np.concatenate([np.zeros((7, 7), dtype=np.float32), gripper[:, None]], axis=1)
    loose = Deadlines({"franka": {"pick": 100, "place": 100}})
    held = judge_episode(PixelJudge(), VideoClip(frames_for(trace), PICK_PLACE, FPS, proprio), loose)
    assert held.switch_times[0] == pytest.approx(0.4) and held.active.tolist()[:6] == [0] * 5 + [1]
    empty = proprio.copy()
    empty[:, -1] = 0.0  # never holds anything: the pick is never done, whatever the frames show
    missed = judge_episode(PixelJudge(), VideoClip(frames_for(trace), PICK_PLACE, FPS, empty), loose)
    assert missed.completed == [False, False] and missed.first_failed == 0
    unchecked = judge_episode(PixelJudge(), VideoClip(frames_for(trace), PICK_PLACE, FPS), loose)
    assert unchecked.switch_times[0] == pytest.approx(0.2)  # frames alone: done at the 2nd step above
    # with the commands that led to each frame: closed on the cube, as before; told to open after the
    # miss at frame 2, the fingers reading 0.45 are opening, not holding
    closing = np.zeros((7, 8), dtype=np.float32)
    frames = frames_for(trace)
    closed = judge_episode(PixelJudge(), VideoClip(frames, PICK_PLACE, FPS, proprio, closing), loose)
    assert closed.switch_times[0] == pytest.approx(0.4)
    opening = closing.copy()
    opening[2:, -1] = 1.0
    reopened = judge_episode(PixelJudge(), VideoClip(frames, PICK_PLACE, FPS, proprio, opening), loose)
    assert reopened.completed == [False, False] and reopened.first_failed == 0


def test_whole_video_is_segmented_by_the_judges_own_detections():
    # subtask 0 done at frame 3 (2nd step >= 0.9); subtask 1 starts at 4, done at 7.
    trace = [0.1, 0.5, 0.95, 0.95, 0.1, 0.3, 0.92, 0.93, 0.2, 0.2]
    verdict = judge_episode(PixelJudge(), VideoClip(frames_for(trace), TWO, FPS), LOOSE)
    assert verdict.completed == [True, True] and verdict.success and verdict.first_failed == -1
    assert verdict.switch_times == pytest.approx([0.3, 0.7])
    assert verdict.active.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    assert verdict.progress == pytest.approx([0.95, 0.93], abs=0.003)
    np.testing.assert_allclose(verdict.trace[:8], trace[:8], atol=0.003)
    assert verdict.trace[8:].tolist() == [1.0, 1.0]  # nothing left to judge


def test_first_missed_deadline_names_the_failing_subtask():
    trace = [0.1, 0.95, 0.95, 0.1, 0.2, 0.3, 0.4, 0.95, 0.95, 0.95]
    clip = VideoClip(frames_for(trace), TWO, FPS)
    # Subtask 1 starts at frame 3 and is done at frame 8: 6 steps. A 5-step deadline misses it.
    tight = judge_episode(PixelJudge(), clip, Deadlines({"franka": {"press_button": 5}}))
    assert tight.completed == [True, False] and tight.first_failed == 1 and not tight.success
    assert tight.switch_times == [pytest.approx(0.2), NEVER]
    ok = judge_episode(PixelJudge(), clip, Deadlines({"franka": {"press_button": 6}}))
    assert ok.success and ok.switch_times == pytest.approx([0.2, 0.8])


def test_video_ending_before_done_fails_there_and_missing_deadline_is_a_clear_error():
    verdict = judge_episode(PixelJudge(), VideoClip(frames_for([0.1, 0.2, 0.95]), TWO, FPS), LOOSE)
    assert verdict.completed == [False, False] and verdict.first_failed == 0
    with pytest.raises(KeyError, match="no deadline for 'press_button' on 'franka'"):
        judge_episode(PixelJudge(), VideoClip(frames_for([0.1]), TWO, FPS), Deadlines({"piper": {"pick": 9}}))


def test_deadlines_are_margin_times_quantile_of_judged_times_and_round_trip(tmp_path):
    # Judged durations of press_button: video a: 3 and 4 steps, video b: 5 and 2 steps.
    a = frames_for([0.1, 0.95, 0.95, 0.1, 0.1, 0.95, 0.95])
    b = frames_for([0.1, 0.1, 0.1, 0.95, 0.95, 0.95, 0.95])
    clips = [VideoClip(a, TWO, FPS), VideoClip(b, TWO, FPS)]
    deadlines = calibrate_deadlines(PixelJudge(), clips, quantile=0.5, margin=1.5)
    # durations 3, 4, 5, 2 -> median 3.5 -> ceil(5.25) = 6
    assert deadlines.steps == {"franka": {"press_button": 6}}
    assert deadlines.samples == {"franka": {"press_button": 4}}
    assert deadlines.default == 11 and deadlines.of("piper", "pick") == 11  # ceil(1.5 x 7 frames)
    deadlines.save(tmp_path / "deadlines.json")
    assert Deadlines.load(tmp_path / "deadlines.json") == deadlines


def test_threshold_calibration_counts_false_completions_on_failed_videos():
    one = Composition("press", "franka", (Subtask("press_button", "red_button"),))

    def video(done_score: float, success: bool) -> Labelled:
        progress = np.array([0.2, 1.0, 1.0, 1.0] if success else [0.1, 0.5, 0.5, 0.5], dtype=np.float32)
        trace = frames_for([0.1, done_score, done_score, done_score])
        return Labelled(trace, one, FPS, np.zeros(4, dtype=np.int64), progress, success)

    # Done scores (pixel / 255): 0.749 and 0.251 on two successes, 0.251 on two failures.
    sure, faint = video(0.75, True), video(0.25, True)
    failures = [video(0.25, False), video(0.25, False)]
    # Successes alone: only 0.2 catches both completions (2 of 2); 0.3-0.7 catch one.
    rule, scores = calibrate_threshold(PixelJudge(), [sure, faint], VerdictConfig())
    assert rule.threshold == 0.2 and scores[0.2] == 1.0 and scores[0.3] == 0.5
    # With the failures, 0.2 also calls both failed presses done: 2 hits of 2 true + 2 false = 0.5,
    # no better than 0.3-0.7 (1 of 2); ties go to the higher threshold.
    rule, scores = calibrate_threshold(PixelJudge(), [sure, faint, *failures], VerdictConfig())
    assert scores[0.2] == 0.5 and scores[0.7] == 0.5 and scores[0.8] == 0.0 and rule.threshold == 0.7
    # Deadlines come from true completions only (the failed presses the judge calls done add none);
    # without any there is nothing to time.
    deadlines = calibrate(PixelJudge(), [sure, faint, *failures], VerdictConfig(), quantile=0.5, margin=1.0)
    assert deadlines.samples == {"franka": {"press_button": 1}}  # at 0.7 only `sure` is confirmed
    with pytest.raises(ValueError, match="needs completed subtasks"):
        calibrate(PixelJudge(), failures, VerdictConfig())


def test_threshold_calibration_counts_an_early_switch_as_a_miss():
    one = Composition("press", "franka", (Subtask("press_button", "red_button"),))
    progress = np.array([0.2, 0.6, 0.9, 1.0, 1.0, 1.0], dtype=np.float32)  # completes at frame 3 (0.3 s)

    def video(scores: list[float]) -> Labelled:
        return Labelled(frames_for(scores), one, FPS, np.zeros(6, dtype=np.int64), progress, True)

    # At 0.2-0.3 both videos switch at frame 2, 0.1 s before the press completes; at 0.4-0.7 only the
    # first switches, at frame 4 (0.1 s late). An early switch leaves the press unfinished, so 0.7 wins
    # with 1 of 2 although 0.3 comes within the 1 s tolerance on both.
    rising, stuck = video([0.1, 0.35, 0.35, 0.75, 0.75, 0.75]), video([0.1, 0.35, 0.35, 0.35, 0.35, 0.35])
    rule, scores = calibrate_threshold(PixelJudge(), [rising, stuck], VerdictConfig())
    assert scores[0.3] == 0.0 and scores[0.4] == scores[0.7] == 0.5 and scores[0.8] == 0.0
    assert rule.threshold == 0.7


def test_the_rule_is_chosen_on_held_rollouts_with_their_hold_as_the_late_allowance():
    """Stage 3 calibrates the threshold on rollouts that hold each completed subtask (here 2 s) and the
    deadlines on every held-out video: a slow, sure confirmation then beats an early, unsure one."""
    one = Composition("press", "franka", (Subtask("press_button", "red_button"),))

    def video(scores: list[float], progress: list[float]) -> Labelled:
        n = len(scores)
        return Labelled(
            frames_for(scores), one, FPS, np.zeros(n, dtype=np.int64), np.array(progress, np.float32),
            progress[-1] >= 1.0,
        )  # fmt: skip

    # completes at frame 3; the score sits at 0.35 until frame 15, then 0.75: at 0.2-0.3 the judge
    # switches at frame 4 (0.1 s after), at 0.4-0.7 at frame 16 (1.3 s after)
    held = video([0.1] * 3 + [0.35] * 12 + [0.75] * 5, [0.2, 0.5, 0.8] + [1.0] * 17)
    stuck = video([0.1] + [0.35] * 19, [0.5] * 20)  # never completes; 0.2-0.3 call it done
    demo = video([0.1, 0.1, 0.95, 0.95], [0.3, 0.6, 1.0, 1.0])  # confirmed at frame 3: 4 steps
    rule, scores = calibrate_threshold(PixelJudge(), [held, stuck], VerdictConfig())  # 1 s allowance
    assert rule.threshold == 0.3 and scores[0.3] == 0.5 and scores[0.7] == 0.0
    deadlines = calibrate(
        PixelJudge(), [demo], VerdictConfig(), quantile=1.0, margin=1.0, min_samples=1,
        rule_videos=[held, stuck], tolerance_s=2.0,
    )  # fmt: skip
    assert deadlines.rule["threshold"] == 0.7  # 1 of 1 true and no false completion, within 2 s
    assert deadlines.steps == {"franka": {"press_button": 4}}  # from the demo alone
    # without rule videos the rule is chosen on `videos`
    assert calibrate(PixelJudge(), [held, stuck], VerdictConfig(), tolerance_s=2.0).rule["threshold"] == 0.7


def test_deadlines_count_the_completed_subtasks_of_failed_videos():
    # The judge confirms the first press at frame 4 (5 steps) and the second at frame 7 (3 steps).
    trace = frames_for([0.1, 0.1, 0.1, 0.95, 0.95, 0.1, 0.95, 0.95])
    index = np.array([0, 0, 0, 0, 0, 1, 1, 1])
    first_done = np.array([0.2, 0.4, 0.6, 1.0, 1.0, 0.1, 0.3, 0.5], dtype=np.float32)  # the 2nd failed
    slow = Labelled(trace, TWO, FPS, index, first_done, False)
    never = Labelled(trace, TWO, FPS, np.zeros(8, dtype=np.int64), np.full(8, 0.3, np.float32), False)
    deadlines = calibrate(
        PixelJudge(), [slow, never], VerdictConfig(), quantile=1.0, margin=1.0, min_samples=1
    )
    # `slow` adds its true first press only; `never` adds nothing, though the judge confirmed both
    assert deadlines.samples == {"franka": {"press_button": 1}}
    assert deadlines.steps == {"franka": {"press_button": 5}}


def test_a_pair_with_too_few_judged_completions_gets_the_fallback_deadline():
    """One fast completion is no deadline for everyone: below `min_samples` the pair falls back to the
    default (and its samples are still reported)."""
    # Judged durations of press_button: 3 and 4 steps in one 7-frame video.
    clips = [VideoClip(frames_for([0.1, 0.95, 0.95, 0.1, 0.1, 0.95, 0.95]), TWO, FPS)]
    few = calibrate_deadlines(PixelJudge(), clips, quantile=1.0, margin=1.0, min_samples=3)
    assert few.steps == {"franka": {}} and few.samples == {"franka": {"press_button": 2}}
    assert few.of("franka", "press_button") == few.default == 7
    enough = calibrate_deadlines(PixelJudge(), clips, quantile=1.0, margin=1.0, min_samples=2)
    assert enough.of("franka", "press_button") == 4
    with pytest.raises(ValueError, match="min_samples"):
        calibrate_deadlines(PixelJudge(), clips, min_samples=0)


def test_fallback_deadline_comes_from_the_longest_successful_video_not_a_long_failed_one():
    done = frames_for([0.1, 0.95, 0.95, 0.1, 0.1, 0.95, 0.95])  # 7 frames, both presses truly done
    timed_out = frames_for([0.1] * 12)  # a failed rollout given 12 steps
    clips = [VideoClip(done, TWO, FPS), VideoClip(timed_out, TWO, FPS)]
    deadlines = calibrate_deadlines(PixelJudge(), clips, truly_completed=[[True, True], [False, False]])
    assert deadlines.default == 11  # ceil(1.5 x 7), not ceil(1.5 x 12) = 18
    only_failed = calibrate_deadlines(PixelJudge(), clips[1:], truly_completed=[[False, False]])
    assert only_failed.default == 18 and only_failed.steps == {}  # nothing succeeded: all videos count


def test_batched_judge_keeps_rows_apart_and_refuses_rows_without_a_subtask():
    online = BatchedJudge(PixelJudge(), rows=2)
    with pytest.raises(RuntimeError, match="reset_rows"):
        online.update(frames_for([0.1, 0.2]), None)
    online.reset_rows([0, 1], TWO.subtasks, "franka")
    np.testing.assert_allclose(online.update(frames_for([0.1, 0.6]), None), [0.1, 0.6], atol=0.003)
    with pytest.raises(ValueError, match="expected"):
        online.update(frames_for([0.1]), None)


def test_batched_judge_advances_only_the_rows_it_is_given():
    config = JudgeConfig(image_size=SIZE, channels=(8,), feature_dim=4, embed_dim=2, hidden_dim=4)
    judge = ProgressJudge(config).eval()
    both, alone = BatchedJudge(judge, rows=2), BatchedJudge(judge, rows=1)
    both.reset_rows([0, 1], TWO.subtasks, "franka")
    alone.reset_rows([0], TWO.subtasks[:1], "franka")
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (3, 2, SIZE, SIZE, 3), dtype=np.uint8)
    proprio = rng.uniform(-1, 1, (3, 2, 8)).astype(np.float32)
    first = both.update(frames[0], proprio[0])
    alone.update(frames[0, :1], proprio[0, :1])
    for t in (1, 2):  # row 1 stands still: its scores and state stay those of the first frame
        progress = both.update(frames[t], proprio[t], rows=np.array([0]))
        expected = alone.update(frames[t, :1], proprio[t, :1])
        np.testing.assert_allclose(progress[0], expected[0], rtol=1e-5)
        assert progress[1] == first[1]
    np.testing.assert_allclose(both.hidden[:, 0], alone.hidden[:, 0], rtol=1e-5)


def test_measures_of_one_case_by_hand():
    # Ground truth: subtask 0 completes at frame 2 (progress 1), subtask 1 fails.
    video = Labelled(
        images=frames_for([0.1, 0.5, 0.95, 0.95, 0.2, 0.4, 0.5, 0.5]),
        composition=TWO,
        fps=FPS,
        subtask_index=np.array([0, 0, 0, 0, 1, 1, 1, 1]),
        progress=np.array([0.0, 0.4, 1.0, 1.0, 0.0, 0.3, 0.6, 0.5], dtype=np.float32),
        success=False,
    )
    assert completion_frames(video) == [2, -1]
    verdict = judge_episode(PixelJudge(), video, LOOSE)
    case = score_case(PixelJudge(), video, verdict)
    assert case.failed and case.judged_failed and case.first_failed == 1 and case.judged_first_failed == 1
    assert case.switches == [pytest.approx((0.3, 0.2))]  # detected at frame 3, true at frame 2
    assert case.missed_switches == 0 and case.false_switches == 0
    results = evaluate_judge(PixelJudge(), [video, _succeeded()], LOOSE)
    row = results["all"]
    assert row["episodes"] == 2 and row["failures"] == 1
    assert (
        row["failure_f1"] == 1.0 and row["outcome_accuracy"] == 1.0 and row["first_failed_agreement"] == 1.0
    )
    # switch errors: 0.1 s (failed video) and 0.1, 0.0 s (succeeded video) -> MAE 0.0667
    assert row["switch_time_mae_s"] == pytest.approx(0.2 / 3)
    assert -1 <= row["spearman_segment"] <= 1 and not math.isnan(row["spearman_online"])
    # four press subtasks: three completed and confirmed, the failed video's second neither
    assert case.subtasks == [("press_button", True, True), ("press_button", False, False)]
    press = {"completed": 3, "confirmed": 3, "missed": 0, "not_completed": 1, "false": 0, "rejected": 1}
    assert row["per_skill"] == {"press_button": press}
    assert "| press_button | 3 | 3 | 0 | 1 | 0 | 1 |" in format_table(results)


def _succeeded() -> Labelled:
    return Labelled(
        images=frames_for([0.2, 0.95, 0.95, 0.3, 0.95, 0.95]),
        composition=TWO,
        fps=FPS,
        subtask_index=np.array([0, 0, 0, 1, 1, 1]),
        progress=np.array([0.1, 1.0, 1.0, 0.2, 0.8, 1.0], dtype=np.float32),
        success=True,
        kind="demo",
    )


class _Camera:
    """A robot whose camera shows a scripted trace, whatever it is told to do."""

    def __init__(self, trace: list[float]) -> None:
        self.frames, self.t = frames_for(trace), 0

    def reset(self, composition, seed):
        self.t = 0
        return {OBS_IMAGE: self.frames[0]}

    def step(self, action):
        self.t += 1
        return {OBS_IMAGE: self.frames[self.t]}


class _Idle:
    """A policy that never moves and never claims to be done."""

    def skills(self):
        return ("press_button",)

    def reset(self):
        pass

    def act(self, obs, subtask, robot, need_done=True):
        return np.zeros(8), 0.0

    def version(self, skill):
        return 0


def test_router_with_the_judge_detector_switches_like_judge_episode():
    # The router sees frames 1.. (frame 0 is the reset observation, before any step).
    trace = [0.0, 0.2, 0.95, 0.95, 0.1, 0.3, 0.92, 0.93, 0.1]
    router = Router(
        _Idle(),
        RouterConfig(detector="judge", deadline_steps=5),
        detector_args={"judge": PixelJudge(), "robot": "franka", "verdict": VerdictConfig()},
    )
    trial = router.run(_Camera(trace), TWO, seed=0)
    assert trial.outcome == "SUCCESS" and trial.switch_steps == [3, 7]
    verdict = judge_episode(PixelJudge(), VideoClip(frames_for(trace[1:]), TWO, FPS), LOOSE)
    assert [round(s * FPS) + 1 for s in verdict.switch_times] == trial.switch_steps


def test_a_skill_whose_done_score_plateaus_lower_gets_its_own_threshold():
    press = Composition("press", "franka", (Subtask("press_button", "red_button"),))
    drawer = Composition("open", "franka", (Subtask("open_drawer", "drawer"),))

    def video(comp: Composition, done_score: float, success: bool) -> Labelled:
        progress = np.array([0.2, 1.0, 1.0, 1.0] if success else [0.1, 0.5, 0.5, 0.5], dtype=np.float32)
        trace = frames_for([0.1, done_score, done_score, done_score])
        return Labelled(trace, comp, FPS, np.zeros(4, dtype=np.int64), progress, success)

    # 6 presses done at 0.95 and 6 failed ones scoring 0.75; 3 drawers done that plateau at 0.65.
    videos = (
        [video(press, 0.95, True)] * 6 + [video(press, 0.75, False)] * 6 + [video(drawer, 0.65, True)] * 3
    )
    # Over all subtasks 0.8-0.9 score 6 / 9 and 0.6 scores 9 / 15, so the rule's threshold is 0.9; the
    # drawers alone score 3 / 3 at 0.2-0.6 and 0 above, so they get 0.6.
    rule, scores = calibrate_threshold(PixelJudge(), videos, VerdictConfig())
    assert scores[0.9] == scores[0.8] == pytest.approx(6 / 9) and scores[0.6] == pytest.approx(9 / 15)
    assert rule.threshold == 0.9 and rule.skill_thresholds == {"open_drawer": 0.6}
    assert Deadlines({}, rule=asdict(rule)).verdict_config(VerdictConfig()) == rule  # JSON round trip
    done = DoneRule(rule, rows=2)
    steps = [done.update(np.array([0.65, 0.65]), ["open_drawer", "press_button"]) for _ in range(2)]
    assert steps[-1].tolist() == [True, False]
    # 3 drawer completions are too few for their own threshold when 4 are asked for
    rule, _ = calibrate_threshold(PixelJudge(), videos, VerdictConfig(), min_samples=4)
    assert rule.skill_thresholds == {}
    with pytest.raises(ValueError, match="open_drawer"):
        VerdictConfig(skill_thresholds={"open_drawer": 1.0})


def test_a_skill_whose_score_touches_the_threshold_before_it_completes_gets_more_steps_in_a_row():
    press = Composition("press", "franka", (Subtask("press_button", "red_button"),))
    drawer = Composition("open", "franka", (Subtask("open_drawer", "drawer"),))

    def video(comp: Composition, scores: list[float], done_at: int) -> Labelled:
        progress = np.array([0.5] * done_at + [1.0] * (len(scores) - done_at), dtype=np.float32)
        return Labelled(frames_for(scores), comp, FPS, np.zeros(len(scores), np.int64), progress, True)

    # The press completes at frame 6 and its score blips over 0.9 for 2 frames before: 2 steps in a row
    # switch at frame 2 (early: a miss), 4 at frame 9 and 8 at frame 13 (0.3 and 0.7 s late: hits).
    blip = video(press, [0.1, 0.95, 0.95] + [0.1] * 3 + [0.95] * 9, done_at=6)
    # The drawer completes at frame 3: 2 steps switch at frame 4, 4 at frame 6; 8 never within the video.
    steady = video(drawer, [0.1] * 3 + [0.95] * 5, done_at=3)
    rule, scores = calibrate_steps(PixelJudge(), [blip] * 3 + [steady] * 3, VerdictConfig(threshold=0.9))
    assert scores == {"open_drawer": {2: 1.0, 4: 1.0, 8: 0.0}, "press_button": {2: 0.0, 4: 1.0, 8: 1.0}}
    # ties go to fewer steps; the drawer keeps the rule's 2
    assert rule.consecutive == 2 and rule.skill_consecutive == {"press_button": 4}
    assert Deadlines({}, rule=asdict(rule)).verdict_config(VerdictConfig()) == rule  # JSON round trip
    done = DoneRule(rule, rows=2)
    steps = [done.update(np.array([0.95, 0.95]), ["open_drawer", "press_button"]).tolist() for _ in range(4)]
    assert steps == [[False, False], [True, False], [True, False], [True, True]]
    # 3 presses are too few for their own count when 4 are asked for
    rule, _ = calibrate_steps(PixelJudge(), [blip] * 3, VerdictConfig(), min_samples=4)
    assert rule.skill_consecutive == {}
    # the whole calibration freezes the counts with the thresholds
    deadlines = calibrate(PixelJudge(), [blip] * 3 + [steady] * 3, VerdictConfig(), quantile=1.0, margin=1.0)
    assert deadlines.rule["skill_consecutive"] == {"press_button": 4}
    assert deadlines.steps == {"franka": {"open_drawer": 5, "press_button": 10}}  # confirmed at frames 4, 9
    with pytest.raises(ValueError, match="press_button"):
        VerdictConfig(skill_consecutive={"press_button": 0})
