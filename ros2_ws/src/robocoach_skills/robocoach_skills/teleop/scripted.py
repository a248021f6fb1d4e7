"""The scripted operator's demo session: it answers requests the way a person at the demo station does.

`ScriptedSession.collect` has the signature of `session.DemoSession.collect`, so one station node
serves either, and the coach cannot tell a scripted station from a human one. Demo slot k of a
request starts from the request's k-th initial-state seed (`DemoTarget.seed`: each seed where
failures concentrate once, then fresh ones); `ScriptedOperator.demo_subtask` records the take on the station's
own SimScene, and the simulator's ground truth judges it. A failed take is discarded with its
reason, as a person throws away a bad take, and the same initial state is tried again with fresh
hand randomness, up to `max_takes_per_demo` times, before the session moves on to the next slot.
Accepted takes are in the episode store (atomic) before anyone is told.

    session = ScriptedSession(SimScene(SceneConfig(robot="piper")), store, ScriptedSessionConfig())
    takes = session.collect(resolve_request(request, "piper"), on_status, canceled=lambda: False)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.operator import OperatorConfig, ScriptedOperator
from robocoach_skills.sim.scene import SimScene
from robocoach_skills.teleop.session import (
    NOT_SUCCEEDED,
    CancelCheck,
    DemoTarget,
    OnStatus,
    OnTake,
    TakeCanceledError,
    TakeResult,
    finish_take,
    stable_seed,
    unreachable_reason,
)

RECORDER = "scripted_operator"  # metadata["recorder"] of every episode this module writes


@dataclass(frozen=True)
class ScriptedSessionConfig:
    """How the scripted station records takes."""

    max_takes_per_demo: int = 3  # takes of one demo slot before moving on to the next seed
    seed: int = 0  # the operator's own randomness, mixed with the request id, slot and take
    preview_frames: int = 4  # frames of each take sent back to operator UIs
    reset_pause_s: float = 0.0  # [s] wait between takes, as a person resetting the scene does (0: none)

    def __post_init__(self) -> None:
        if self.max_takes_per_demo < 1:
            raise ValueError(
                f"ScriptedSessionConfig.max_takes_per_demo must be >= 1, got {self.max_takes_per_demo}"
            )
        if self.seed < 0:
            raise ValueError(f"ScriptedSessionConfig.seed must be >= 0, got {self.seed}")
        if self.preview_frames < 0:
            raise ValueError(f"ScriptedSessionConfig.preview_frames must be >= 0, got {self.preview_frames}")
        if not self.reset_pause_s >= 0:
            raise ValueError(f"ScriptedSessionConfig.reset_pause_s must be >= 0, got {self.reset_pause_s}")


class ScriptedSession:
    """Records requested subtask demos with the scripted operator; call `collect` from the scene's thread."""

    def __init__(self, scene: SimScene, store: EpisodeStore, config: ScriptedSessionConfig):
        size = scene.config.image_size
        if not scene.config.render:
            raise ValueError("the scene does not render; a demo needs camera frames")
        if (store.info.fps, store.info.image_size) != (scene.config.policy_hz, (size, size)):
            raise ValueError(
                f"the episode store at {store.root} holds {store.info.fps} fps, {store.info.image_size} px "
                f"episodes; the scene records {scene.config.policy_hz} fps, {(size, size)} px"
            )
        self.scene, self.store, self.config = scene, store, config

    def collect(
        self, target: DemoTarget, on_status: OnStatus, canceled: CancelCheck, on_take: OnTake | None = None
    ) -> list[TakeResult]:
        """Record takes until the request's count is accepted (`target.done` of it already stored).

        A demo slot retakes its initial state up to `max_takes_per_demo` times; a slot that spends
        them is replaced by one more slot on the next seed (`DemoTarget.seed`: a fresh initial state
        once the request's seeds are used), at most as many extra slots as the request still wants,
        so a matched demo budget is met wherever the scene allows it.
        `on_status(text, accepted_so_far)` is called before every take, `on_take` after it; raises
        TakeCanceledError when `canceled()` is true between takes (a take lasts seconds).
        """
        results: list[TakeResult] = []
        accepted, count = target.done, target.request.count
        for slot in range(target.done, 2 * count - target.done):
            if accepted >= count:
                break
            seed = target.seed(slot)
            for take in range(self.config.max_takes_per_demo):
                if results:
                    time.sleep(self.config.reset_pause_s)
                if canceled():
                    raise TakeCanceledError
                on_status(
                    f"demo {accepted + 1}/{count} (slot {slot + 1}), take {take + 1}: seed {seed}", accepted
                )
                result = self._take(target, slot, take, seed)
                results.append(result)
                accepted += result.accepted
                if on_take is not None:
                    on_take(result)
                if result.accepted:
                    break
        return results

    def _take(self, target: DemoTarget, slot: int, take: int, seed: int) -> TakeResult:
        request = target.request
        # Fresh hand randomness per take: the same operator seed would replay the failed take exactly.
        hand_seed = stable_seed(self.config.seed, request.request_id, slot, take)
        operator = ScriptedOperator(OperatorConfig(seed=hand_seed))
        episode = operator.demo_subtask(self.scene, target.composition, target.index, seed)
        episode.metadata.update(recorder=RECORDER, request_id=request.request_id, round=request.round)
        if not episode.metadata["prerequisites_ok"]:
            reason = unreachable_reason(target, seed)
        else:
            reason = "" if episode.success else NOT_SUCCEEDED
        return finish_take(episode, seed, self.store, reason, self.config.preview_frames)
