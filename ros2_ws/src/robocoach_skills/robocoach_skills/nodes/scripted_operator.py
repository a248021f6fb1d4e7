"""`scripted_operator` node: the embedded default's operator station, answering demo requests on the sim.

It is an operator station like `demo_recorder` (same topic, same `CollectDemo` action, same
rejections, see `nodes.station`), but each take is recorded by the scripted operator on the node's
own SimScene (`teleop.scripted`) instead of a person at a teleop rig.

    ros2 run robocoach_skills scripted_operator --ros-args -p robot:=piper -p store:=/tmp/episodes
"""

from __future__ import annotations

from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_skills.nodes.spin import spin_node
from robocoach_skills.nodes.station import OperatorStation
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.teleop.scripted import ScriptedSession, ScriptedSessionConfig


def open_store(path: str, image_size: int) -> EpisodeStore:
    """The episode store at `path`, created for `image_size` frames at the sim's default rate if missing."""
    try:
        return EpisodeStore(path)
    except FileNotFoundError:
        info = StoreInfo(fps=SceneConfig().policy_hz, image_size=(image_size, image_size))
        return EpisodeStore.create(path, info, exist_ok=True)  # exist_ok: another node may race us


class ScriptedOperatorNode(OperatorStation):
    """A scripted demo station on the simulated robot; see the module docstring."""

    def __init__(self) -> None:
        super().__init__("scripted_operator")
        declare = self.declare_parameter
        robot = declare("robot", "franka").value  # embodiment the station records on: franka or piper
        store_dir = declare("store", "").value  # episode store accepted demos go to (created if missing)
        image_size = declare("image_size", 64).value  # camera image edge [px]; must match the store's
        config = ScriptedSessionConfig(
            max_takes_per_demo=declare("max_takes_per_demo", 3).value,  # takes per demo slot
            seed=declare("seed", 0).value,  # the operator's own randomness
            reset_pause_s=declare("reset_pause_s", 0.0).value,  # [s] between takes, as a person resets
        )
        if not store_dir:
            raise ValueError("parameter store is required (the episode store accepted demos go to)")
        store = open_store(store_dir, image_size)
        scene_config = SceneConfig(robot=robot, image_size=image_size, policy_hz=store.info.fps)
        self.scene = self.worker.submit(SimScene, scene_config).result()  # renders on the worker thread
        self.serve(robot, ScriptedSession(self.scene, store, config))
        self.get_logger().info(
            f"scripted demo station: {robot}, {image_size} px at {store.info.fps} fps, store {store_dir}, "
            f"{config.max_takes_per_demo} takes per demo, seed {config.seed}, "
            f"{config.reset_pause_s:g} s between takes"
        )

    def destroy_node(self) -> None:
        self.worker.submit(self.scene.close).result()
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    spin_node(ScriptedOperatorNode, args, threads=4)


if __name__ == "__main__":
    main()
