"""UTF-8 checking of proto2 ``string`` fields, which upb does not do.

upb (protobuf's C runtime for Python) does not check UTF-8 when it parses a proto2 ``string``
field. The parse succeeds, and reading the field then gives ``bytes`` instead of ``str``. Code
that reads decoded messages relies on ``str``: ``.encode()``, ``.split()``, sorting with other
names, and copying the value into another message, which does check and raises
``UnicodeDecodeError``. So the decoders of this package reject such a message with their own
documented error.

How: upb does check UTF-8 in fields whose edition feature ``utf8_validation`` is VERIFY. Each
message type that holds strings gets a twin, built on first use in a private descriptor pool.
The twin is the same .proto file restated as edition 2023 with proto2's semantics: explicit
presence, closed enums, expanded repeated fields, ``required`` kept as LEGACY_REQUIRED. The one
difference is that UTF-8 verification is on. The twin accepts exactly the bytes the original
accepts, except strings that are not UTF-8, so a second parse of the same bytes by the twin is
the check. It runs in C and costs what the first parse cost: about 0.5 us for a command or a
MessageMetadata. A Python walk over the string fields of the parsed message cost 4 - 7 us per
SEND. A type whose strings can only be in a few top-level fields (a bookie Request) is first
checked for any of them being set, so an add request is not parsed twice. The twin is stricter
than "every field reads as ``str``" in one way: it also refuses invalid UTF-8 in an occurrence
of a field that a later occurrence on the wire overrides. No client writes that.
``bench/fuzz_decoders.py`` (target ``utf8_check``) compares the twin's verdict with a walk of
the wire format and with a walk of the parsed message.

Shared by the three wire-format packages (``protocols.pulsar``, ``protocols.bookkeeper``,
``protocols.managed_ledger``).
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message import DecodeError, Message

__all__ = ["invalid_utf8_field"]

_F = descriptor_pb2.FeatureSet
_FIELD = descriptor_pb2.FieldDescriptorProto
_STRING = FieldDescriptor.TYPE_STRING

# A type with at most this many top-level fields that may hold strings is checked field by
# field first: a bookie Request holds strings only in requestContext and authRequest, both
# usually unset, and re-parsing its entry body for nothing would cost as much as the first parse.
_MAX_GATES = 3


class _Check:
    """How to check one message class: its twin (None: the type holds no string at any depth)
    and, when they are few, its top-level fields that may hold strings, as (name, repeated)."""

    __slots__ = ("twin", "gates")

    def __init__(self, twin: type[Message] | None, gates: tuple[tuple[str, bool], ...] | None) -> None:
        self.twin = twin
        self.gates = gates


_CHECKS: dict[type, _Check] = {}  # message class -> how to check it
_POOLS: dict[str, DescriptorPool] = {}  # .proto file name -> the pool of its twins


def _holds_strings(desc: Descriptor, seen: set[str]) -> bool:
    if desc.full_name in seen:
        return False
    seen.add(desc.full_name)
    return any(
        f.type == _STRING or (f.message_type is not None and _holds_strings(f.message_type, seen)) for f in desc.fields
    )


def _twin_pool(file: FileDescriptor) -> DescriptorPool:
    """A pool holding ``file`` restated as edition 2023, proto2 semantics, UTF-8 verified."""
    pool = _POOLS.get(file.name)
    if pool is not None:
        return pool
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    if proto.dependency or proto.extension:  # none in Magnetar's protos; a test builds every twin
        raise NotImplementedError(f"{file.name}: imports and extensions have no UTF-8 twin")
    proto.syntax = "editions"
    proto.edition = descriptor_pb2.EDITION_2023
    features = proto.options.features
    features.field_presence = _F.EXPLICIT
    features.enum_type = _F.CLOSED
    features.repeated_field_encoding = _F.EXPANDED
    features.json_format = _F.LEGACY_BEST_EFFORT
    features.utf8_validation = _F.VERIFY  # the one difference from proto2
    messages = list(proto.message_type)
    while messages:
        msg = messages.pop()
        messages.extend(msg.nested_type)
        if msg.options.map_entry or msg.extension_range:
            raise NotImplementedError(f"{msg.name}: maps and extension ranges have no UTF-8 twin")
        for field in msg.field:
            if field.type == _FIELD.TYPE_GROUP:
                raise NotImplementedError(f"{msg.name}.{field.name}: groups have no UTF-8 twin")
            if field.label == _FIELD.LABEL_REQUIRED:
                field.label = _FIELD.LABEL_OPTIONAL
                field.options.features.field_presence = _F.LEGACY_REQUIRED
            if field.options.HasField("packed"):
                packed = field.options.packed
                field.options.features.repeated_field_encoding = _F.PACKED if packed else _F.EXPANDED
                field.options.ClearField("packed")
    pool = DescriptorPool()
    pool.Add(proto)
    _POOLS[file.name] = pool
    return pool


def _check_of(cls: type) -> _Check:
    check = _CHECKS.get(cls)
    if check is not None:
        return check
    desc = cls.DESCRIPTOR  # type: ignore[attr-defined]
    if not _holds_strings(desc, set()):
        check = _Check(None, None)
    else:
        twin = message_factory.GetMessageClass(_twin_pool(desc.file).FindMessageTypeByName(desc.full_name))
        gates = tuple(
            (f.name, f.is_repeated)
            for f in desc.fields
            if f.type == _STRING or (f.message_type is not None and _holds_strings(f.message_type, set()))
        )
        check = _Check(twin, gates if len(gates) <= _MAX_GATES else None)
    _CHECKS[cls] = check
    return check


def _twin(cls: type) -> type[Message] | None:
    """The UTF-8 verifying twin of a message class (None when it holds no string)."""
    return _check_of(cls).twin


def _bytes_string(msg: Message) -> str | None:
    """The first string field that reads as bytes (for the error message only)."""
    for field, value in msg.ListFields():
        values = value if field.is_repeated else (value,)
        if field.type == _STRING:
            if any(type(v) is bytes for v in values):
                name: str = field.full_name
                return name
        elif field.message_type is not None:
            for sub in values:
                found = _bytes_string(sub)
                if found is not None:
                    return found
    return None


def invalid_utf8_field(msg: Message, data: bytes | bytearray | memoryview) -> str | None:
    """The full name (``package.Message.field``) of a ``string`` field, at any depth of ``msg``,
    whose bytes on the wire are not UTF-8; ``None`` when all are (then every string field reads
    as ``str``). When the bad bytes were in an occurrence that a later one overrides, the name is
    the message type's, marked ``(an overridden occurrence)``.

    ``msg`` must have been parsed without error from exactly ``data``. Never raises then, except
    ``NotImplementedError`` on first use of a type whose file has imports, extensions, maps or
    groups. None of Magnetar's protos has any, and a test builds every twin.
    """
    check = _CHECKS.get(type(msg)) or _check_of(type(msg))
    if check.twin is None:
        return None
    # all-ASCII bytes hold no invalid UTF-8 anywhere: skip the twin parse (most frames, and the
    # cost of every SEND's command and metadata on the broker's unbatched path)
    if data.isascii() if not isinstance(data, memoryview) else data.tobytes().isascii():
        return None
    if check.gates is not None:
        for name, repeated in check.gates:
            if getattr(msg, name) if repeated else msg.HasField(name):
                break
        else:
            return None  # no field that may hold a string is set
    try:
        check.twin.FromString(data)  # type: ignore[arg-type]  # stub says bytes; protobuf takes any buffer
    except DecodeError:
        return _bytes_string(msg) or f"{msg.DESCRIPTOR.full_name} (an overridden occurrence)"
    return None
