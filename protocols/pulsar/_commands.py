"""Building and reading BaseCommand envelopes.

A BaseCommand carries its ``type`` plus exactly one sub-message whose field number equals the
type value (SEND = 6 lives in field 6, ``send``). The map between the two is derived from the
generated descriptor, so it cannot drift from the .proto file.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message

from .pulsar_api_pb2 import BaseCommand

_FIELD_BY_TYPE: dict[int, str] = {
    field.number: field.name
    for field in BaseCommand.DESCRIPTOR.fields
    if field.name != "type" and field.message_type is not None
}
_TYPE_ENUM = BaseCommand.DESCRIPTOR.enum_types_by_name["Type"]
assert set(_FIELD_BY_TYPE) == {v.number for v in _TYPE_ENUM.values}, "BaseCommand fields and types drifted"


def _type_value(type_: int | str) -> int:
    if isinstance(type_, str):
        value = _TYPE_ENUM.values_by_name.get(type_)
        if value is None:
            raise ValueError(f"unknown BaseCommand type {type_!r}")
        number: int = value.number
        return number
    if type_ not in _FIELD_BY_TYPE:
        raise ValueError(f"unknown BaseCommand type {type_!r}")
    return int(type_)


def command_field(type_: int | str) -> str:
    """The BaseCommand field name holding the sub-message of a type (``SEND`` -> ``"send"``).

    Raises ``ValueError`` for an unknown type.
    """
    return _FIELD_BY_TYPE[_type_value(type_)]


def make_command(type_: int | str, /, **fields: Any) -> BaseCommand:
    """Build a BaseCommand of ``type_`` (an int or a name such as ``"SEND"``).

    ``fields`` initialise the matching sub-message exactly like its protobuf constructor
    (nested messages may be messages or dicts, repeated fields iterables); the sub-message is
    set even when ``fields`` is empty (PING, PONG). Raises ``ValueError`` for an unknown type
    and ``TypeError``/``ValueError`` (from protobuf) for unknown fields or wrong value types.
    Required fields are checked only when the command is encoded.
    """
    value = _type_value(type_)
    name = _FIELD_BY_TYPE[value]
    wire_type: Any = value  # the stub types ``type`` as the enum class; any defined number works
    command = BaseCommand(type=wire_type)
    sub = getattr(command, name)
    sub.SetInParent()
    if fields:
        sub.CopyFrom(type(sub)(**fields))
    return command


def command_body(command: BaseCommand) -> Message | None:
    """The sub-message matching ``command.type``, or ``None`` when the sender left it unset."""
    name = _FIELD_BY_TYPE.get(command.type)
    if name is None or not command.HasField(name):
        return None
    body: Message = getattr(command, name)
    return body


def type_name(type_: int) -> str:
    """The name of a BaseCommand type (``6`` -> ``"SEND"``); ``"UNKNOWN(n)"`` if not defined."""
    value = _TYPE_ENUM.values_by_number.get(type_)
    return value.name if value is not None else f"UNKNOWN({type_})"


__all__ = ["command_body", "command_field", "make_command", "type_name"]
