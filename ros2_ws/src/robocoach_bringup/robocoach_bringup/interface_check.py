"""Deterministic sample messages and canonical dicts for every robocoach_msgs interface.

Used to check that two processes (or a robot workstation and the GPU box) agree on the interfaces:
the `interface_echo` node answers every message, service and action with content derived from
what it received, and the round-trip tests compare field by field. Plain Python, no rclpy.

>>> from robocoach_msgs.msg import Subtask
>>> sample_message(Subtask, seed=1).skill
'skill-1'
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterator

import robocoach_msgs.action
import robocoach_msgs.msg
import robocoach_msgs.srv

SEQUENCE = re.compile(r"^sequence<(.+?)(?:, \d+)?>$")
ARRAY = re.compile(r"^(.+)\[(\d+)\]$")
SEQUENCE_LEN = 2  # elements per sample sequence: enough to catch ordering and length bugs
INTEGER_TYPES = {
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "octet",
    "char",
    "byte",
}
FLOAT_TYPES = {"float", "double"}

IMAGE_SIDE = 4  # sample images are IMAGE_SIDE x IMAGE_SIDE rgb8


def message_types() -> dict[str, type]:
    """Every robocoach_msgs message class by name."""
    return {name: getattr(robocoach_msgs.msg, name) for name in _public_names(robocoach_msgs.msg)}


def service_types() -> dict[str, type]:
    return {name: getattr(robocoach_msgs.srv, name) for name in _public_names(robocoach_msgs.srv)}


def action_types() -> dict[str, type]:
    return {name: getattr(robocoach_msgs.action, name) for name in _public_names(robocoach_msgs.action)}


def echo_name(type_name: str) -> str:
    """Name the echo node uses for an interface: `JudgeRollout` -> `/robocoach/echo/judge_rollout`."""
    return "/robocoach/echo/" + re.sub(r"(?<!^)(?=[A-Z])", "_", type_name).lower()


def _public_names(module) -> list[str]:
    return sorted(n for n in dir(module) if n[:1].isupper() and "_" not in n)


def _message_class(type_string: str) -> type:
    package, name = type_string.split("/")
    return getattr(importlib.import_module(f"{package}.msg"), name)


def _sample_value(type_string: str, seed: int, name: str):
    if match := SEQUENCE.match(type_string):
        return [_sample_value(match.group(1), seed * 10 + i, name) for i in range(SEQUENCE_LEN)]
    if match := ARRAY.match(type_string):
        return [_sample_value(match.group(1), seed * 10 + i, name) for i in range(int(match.group(2)))]
    if type_string in ("string", "wstring") or type_string.startswith(("string<", "wstring<")):
        return f"{name}-{seed}"
    if type_string == "boolean":
        return seed % 2 == 1
    if type_string in INTEGER_TYPES:
        return (seed * 7 + len(name)) % 120
    if type_string in FLOAT_TYPES:
        return seed + 0.25  # exactly representable in float32
    return sample_message(_message_class(type_string), seed)


def sample_message(cls: type, seed: int = 0):
    """A message of `cls` with every field set to a deterministic, non-default value.

    Sequences get SEQUENCE_LEN elements and nested messages are filled recursively; sensor_msgs/Image
    is filled as a consistent rgb8 image so images are exercised as images.
    """
    msg = cls()
    if cls.__module__.startswith("sensor_msgs") and cls.__name__ == "Image":
        msg.header = sample_message(type(msg.header), seed)
        msg.height = msg.width = IMAGE_SIDE
        msg.encoding, msg.step = "rgb8", IMAGE_SIDE * 3
        msg.data = bytes((seed * 31 + i) % 256 for i in range(IMAGE_SIDE * IMAGE_SIDE * 3))
        return msg
    for field, type_string in cls.get_fields_and_field_types().items():
        setattr(msg, field, _sample_value(type_string, seed, field))
    return msg


def to_dict(msg) -> dict:
    """Canonical plain-Python form of a message (arrays as lists, bytes as ints), for comparisons."""
    out = {}
    for field in msg.get_fields_and_field_types():
        out[field] = _plain(getattr(msg, field))
    return out


def _plain(value):
    if hasattr(value, "get_fields_and_field_types"):
        return to_dict(value)
    if isinstance(value, (bytes, bytearray)):
        return list(value)
    if isinstance(value, (list, tuple)) or type(value).__name__ in ("array", "ndarray"):
        return [_plain(v) for v in value]
    return value


def digest(msg) -> str:
    """JSON of `to_dict(msg)`: what the echo node writes back so the sender can check every field."""
    return json.dumps(to_dict(msg), sort_keys=True)


def _string_slots(msg, prefix: tuple = ()) -> Iterator[tuple]:
    for field, type_string in msg.get_fields_and_field_types().items():
        value = getattr(msg, field)
        if type_string == "string":
            yield (*prefix, field)
        elif hasattr(value, "get_fields_and_field_types"):
            yield from _string_slots(value, (*prefix, field))
        elif (
            type_string.startswith("sequence<") and value and hasattr(value[0], "get_fields_and_field_types")
        ):
            yield from _string_slots(value[0], (*prefix, field, 0))


def first_string_slot(msg) -> tuple | None:
    """Path to the first string field (depth first, into the first element of message sequences)."""
    return next(_string_slots(msg), None)


def set_slot(msg, slot: tuple, value) -> None:
    for key in slot[:-1]:
        msg = msg[key] if isinstance(key, int) else getattr(msg, key)
    setattr(msg, slot[-1], value)


def echo_reply(reply_cls: type, received, seed: int = 0):
    """The echo node's answer: a sample `reply_cls` carrying `digest(received)` in its first string field.

    A reply type without any string field (e.g. Imagine feedback) is answered with the plain sample.
    """
    reply = sample_message(reply_cls, seed)
    if (slot := first_string_slot(reply)) is not None:
        set_slot(reply, slot, digest(received))
    return reply
