"""Batched payloads: ``[u32 size][SingleMessageMetadata][payload]`` repeated.

A producer packs several messages into one entry; the outer MessageMetadata says how many in
``num_messages_in_batch`` and the payload (after decompression, which is the caller's
business) is this sequence. Consumers treat an entry as a batch whenever
``num_messages_in_batch`` is present, even for one message.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from google.protobuf.message import DecodeError

from .._utf8 import invalid_utf8_field
from ._errors import MalformedBatch
from .pulsar_api_pb2 import SingleMessageMetadata

_U32 = struct.Struct(">I")


def split_batch(payload: bytes | memoryview, count: int | None = None) -> list[tuple[SingleMessageMetadata, bytes]]:
    """Split an uncompressed batch payload into ``(SingleMessageMetadata, payload)`` pairs.

    With ``count`` (the outer ``num_messages_in_batch``) exactly that many messages must be
    present; without it the payload is read to its end. Raises :class:`MalformedBatch` for a
    truncated entry, an unparsable metadata or one with a ``string`` field that is not UTF-8, a
    negative or overrunning ``payload_size``, a message-count mismatch or trailing bytes.
    """
    if count is not None and count < 0:
        raise MalformedBatch(f"negative message count {count}")
    view = memoryview(payload)
    out: list[tuple[SingleMessageMetadata, bytes]] = []
    offset = 0
    while offset < len(view) if count is None else len(out) < count:
        index = len(out)
        if offset + 4 > len(view):
            raise MalformedBatch(f"message {index}: truncated metadata size at offset {offset}")
        (meta_size,) = _U32.unpack_from(view, offset)
        offset += 4
        if meta_size > len(view) - offset:
            raise MalformedBatch(f"message {index}: metadata size {meta_size} overruns the batch")
        meta = SingleMessageMetadata()
        meta_bytes = view[offset : offset + meta_size]
        try:
            meta.ParseFromString(meta_bytes)  # type: ignore[arg-type]  # stub says bytes; protobuf takes any buffer
        except DecodeError as exc:
            raise MalformedBatch(f"message {index}: unparsable SingleMessageMetadata: {exc}") from exc
        if not meta.IsInitialized():
            raise MalformedBatch(f"message {index}: SingleMessageMetadata lacks payload_size")
        bad = invalid_utf8_field(meta, meta_bytes)
        if bad is not None:
            raise MalformedBatch(f"message {index}: SingleMessageMetadata field {bad} is not UTF-8")
        offset += meta_size
        size = meta.payload_size
        if size < 0 or size > len(view) - offset:
            raise MalformedBatch(
                f"message {index}: payload_size {size} overruns the batch ({len(view) - offset} bytes left)"
            )
        out.append((meta, bytes(view[offset : offset + size])))
        offset += size
    if offset != len(view):
        raise MalformedBatch(f"{len(view) - offset} trailing bytes after {len(out)} messages")
    return out


def build_batch(messages: Iterable[tuple[SingleMessageMetadata, bytes]]) -> bytes:
    """Pack ``(SingleMessageMetadata, payload)`` pairs into one batch payload.

    ``payload_size`` is set from each payload (the given metadata objects are not modified).
    """
    parts: list[bytes] = []
    for meta, data in messages:
        single = SingleMessageMetadata()
        single.CopyFrom(meta)
        single.payload_size = len(data)
        encoded = single.SerializeToString()
        parts += (_U32.pack(len(encoded)), encoded, bytes(data))
    return b"".join(parts)


__all__ = ["build_batch", "split_batch"]
