"""A fake AgileX PiPER on python-can's `virtual` bus: it streams feedback the way the arm does and
records every frame it receives.

The frame layouts are written out here from the PiPER CAN protocol (as piper_sdk 0.6.2 decodes
them in `protocol/protocol_v2/piper_protocol_v2.py`; ids from `piper_msgs/msg_v2/can_id.py`), with
`struct`, independently of the SDK's encoder, so the tests check the wire format, not an SDK round trip.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Sequence

import can

# Feedback the arm streams.
JOINT_FEEDBACK_IDS = (0x2A5, 0x2A6, 0x2A7)  # joints 1&2, 3&4, 5&6: two big-endian int32, 0.001 degree
GRIPPER_FEEDBACK_ID = 0x2A8  # int32 opening [0.001 mm], int16 effort [0.001 N m], uint8 status, pad
# Per driver 1..6: u16 voltage, i16 driver temperature, i8 motor temperature, u8 status, u16 current.
LOW_SPEED_FEEDBACK_IDS = tuple(range(0x261, 0x267))
DRIVER_ENABLED_BIT = 1 << 6  # bit 6 of the low-speed status byte: driver enabled

# Commands it receives.
EMERGENCY_STOP_ID = 0x150
MOTION_CTRL_2_ID = 0x151
JOINT_CTRL_IDS = (0x155, 0x156, 0x157)
GRIPPER_CTRL_ID = 0x159
MOTOR_ENABLE_ID = 0x471
ALL_MOTORS, ENABLE_FLAG = 7, 0x02

NOMINAL_VOLTAGE = 240  # 24.0 V in 0.1 V, what a powered PiPER reports


def unpack_joint_pair(data: bytes) -> tuple[int, int]:
    """Two joint values [0.001 degree] of a 0x155-0x157 (or 0x2A5-0x2A7) frame."""
    return struct.unpack(">ii", bytes(data))


def unpack_gripper(data: bytes) -> tuple[int, int, int, int]:
    """(opening [0.001 mm], effort [0.001 N m], code, set_zero) of a 0x159 frame."""
    return struct.unpack(">iHBB", bytes(data))


class FakePiperArm:
    """Streams joint, gripper and driver feedback every `period` seconds; optionally follows commands.

    `received` holds every frame the fake heard (the SDK's own requests included), in order.
    """

    def __init__(
        self,
        channel: str,
        joints_millideg: Sequence[int] = (0, 0, 0, 0, 0, 0),
        gripper_micrometres: int = 0,
        period: float = 0.005,  # the real arm streams joint feedback at about 200 Hz
        follow_commands: bool = True,  # move the reported pose to each commanded target (an ideal arm)
        answers_enable: bool = True,  # False: a faulty arm whose drivers never report enabled
    ):
        self.bus = can.Bus(interface="virtual", channel=channel)
        self.joints = list(joints_millideg)
        self.gripper = gripper_micrometres
        self.period = period
        self.follow_commands = follow_commands
        self.answers_enable = answers_enable
        self.enabled = False
        self.received: list[can.Message] = []
        self.streaming = threading.Event()
        self.streaming.set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"fake-piper-{channel}", daemon=True)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> FakePiperArm:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        self.bus.shutdown()

    def stop_feedback(self) -> float:
        """Go silent (cable pulled, arm powered off); returns the time of the last frame sent."""
        self.streaming.clear()
        time.sleep(2 * self.period)  # let a cycle in progress finish
        return self._last_sent

    # ------------------------------------------------------------------ inspection
    def frames(self, arbitration_id: int) -> list[bytes]:
        with self._lock:
            return [bytes(m.data) for m in self.received if m.arbitration_id == arbitration_id]

    def ids(self) -> list[int]:
        with self._lock:
            return [m.arbitration_id for m in self.received]

    def commanded_joints(self) -> list[tuple[int, ...]]:
        """Every complete joint command (0x155, 0x156, 0x157 in a row) as six 0.001-degree values."""
        pairs = [self.frames(i) for i in JOINT_CTRL_IDS]
        return [
            unpack_joint_pair(a) + unpack_joint_pair(b) + unpack_joint_pair(c)
            for a, b, c in zip(*pairs, strict=False)
        ]

    # ------------------------------------------------------------------ the arm
    _last_sent = 0.0

    def _feedback(self) -> list[can.Message]:
        frames = [
            can.Message(arbitration_id=fid, data=struct.pack(">ii", *self.joints[2 * k : 2 * k + 2]))
            for k, fid in enumerate(JOINT_FEEDBACK_IDS)
        ]
        frames.append(
            can.Message(arbitration_id=GRIPPER_FEEDBACK_ID, data=struct.pack(">ihBB", self.gripper, 0, 0, 0))
        )
        status = DRIVER_ENABLED_BIT if self.enabled else 0
        frames += [
            can.Message(arbitration_id=fid, data=struct.pack(">HhbBH", NOMINAL_VOLTAGE, 30, 30, status, 0))
            for fid in LOW_SPEED_FEEDBACK_IDS
        ]
        for frame in frames:
            frame.is_extended_id = False
        return frames

    def _handle(self, msg: can.Message) -> None:
        with self._lock:
            self.received.append(msg)
        data = bytes(msg.data)
        if msg.arbitration_id == MOTOR_ENABLE_ID and data[:2] == bytes((ALL_MOTORS, ENABLE_FLAG)):
            self.enabled = self.answers_enable
        elif self.follow_commands and msg.arbitration_id in JOINT_CTRL_IDS:
            k = JOINT_CTRL_IDS.index(msg.arbitration_id)
            self.joints[2 * k : 2 * k + 2] = unpack_joint_pair(data)
        elif self.follow_commands and msg.arbitration_id == GRIPPER_CTRL_ID:
            self.gripper = unpack_gripper(data)[0]

    def _run(self) -> None:
        next_tick = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_tick:
                if self.streaming.is_set():
                    for frame in self._feedback():
                        self.bus.send(frame)
                    self._last_sent = time.time()
                next_tick = now + self.period
            msg = self.bus.recv(timeout=max(next_tick - time.monotonic(), 0.0))
            if msg is not None:
                self._handle(msg)
