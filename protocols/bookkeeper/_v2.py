"""BookKeeper's pre-v3 ("v2") bookie protocol, sans-IO: the binary packets BookKeeper's client
sends with ``useV2WireProtocol=true`` (the default of Pulsar's brokers), for a bookie to serve.

Frames are the same ``[length u32][payload]`` as v3 (``FrameDecoder``); the payload is not a
protobuf but, all big-endian::

    request   [header i32][...]
      ADD     header, masterKey (20 bytes), body (the digest-framed entry: it starts with the
              ledger and entry ids)
      READ    header, ledgerId i64, entryId i64, masterKey (20 bytes, only with FLAG_DO_FENCING)
    response  [header i32][errorCode i32][ledgerId i64][entryId i64][body: READ with EOK only]

``header = version << 24 | opCode << 16 | flags`` (version 2 in practice; version 0 packets are
the bare op code). A v2 client matches a response to its request by (operation, ledger id, entry
id): a response carries the ids of its request. Error codes are v2's own numbers
(``v2_status``). Rules:

1. ``is_v2_payload`` tells a v2 payload from a v3 one by its first byte: a v3 ``Request`` starts
   with its header field's tag ``0x0a``, a v2 packet with its version (0 to 2).
2. ``parse_v2_request`` returns a ``V2Request`` for ADD and READ and raises ``MalformedFrame`` for
   anything else (other operations are v3-only, or AUTH and BATCH_READ_ENTRY, not served), or a
   packet too short for its fields.
3. ``encode_v2_response`` frames a response (length prefix included).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from .._errors import MalformedFrame
from ._codes import StatusCode

__all__ = [
    "MASTER_KEY_LENGTH",
    "V2Flag",
    "V2Op",
    "V2Request",
    "encode_v2_response",
    "is_v2_payload",
    "parse_v2_request",
    "v2_status",
]

MASTER_KEY_LENGTH = 20
_HEADER = struct.Struct(">i")
_IDS = struct.Struct(">qq")
_RESPONSE = struct.Struct(">Iiiqq")  # frame length, header, error code, ledger id, entry id


class V2Op(enum.IntEnum):
    """v2 operation codes (BookieProtocol)."""

    ADD_ENTRY = 1
    READ_ENTRY = 2
    AUTH = 3
    READ_LAC = 4
    WRITE_LAC = 5
    GET_BOOKIE_INFO = 6
    BATCH_READ_ENTRY = 7


class V2Flag(enum.IntFlag):
    """v2 header flags."""

    NONE = 0
    DO_FENCING = 0x0001
    RECOVERY_ADD = 0x0002
    HIGH_PRIORITY = 0x0004


_V2_STATUS: dict[int, int] = {
    StatusCode.EOK: 0,
    StatusCode.ENOLEDGER: 1,
    StatusCode.ENOENTRY: 2,
    StatusCode.EBADREQ: 100,
    StatusCode.EIO: 101,
    StatusCode.EUA: 102,
    StatusCode.EBADVERSION: 103,
    StatusCode.EFENCED: 104,
    StatusCode.EREADONLY: 105,
    StatusCode.ETOOMANYREQUESTS: 106,
    StatusCode.EUNKNOWNLEDGERSTATE: 107,
}


def v2_status(status: int) -> int:
    """The v2 error code of a v3 status (EIO's for one v2 lacks)."""
    return _V2_STATUS.get(int(status), 101)


@dataclass(frozen=True, slots=True)
class V2Request:
    """A parsed v2 request: ``body`` is the entry of an ADD, ``master_key`` that of an ADD or a
    fencing READ (empty otherwise)."""

    version: int
    op: V2Op
    flags: V2Flag
    ledger_id: int
    entry_id: int
    master_key: bytes = b""
    body: bytes = b""


def is_v2_payload(payload: bytes | bytearray | memoryview) -> bool:
    """True when a frame's payload is a v2 packet rather than a v3 protobuf (rule 1)."""
    return len(payload) > 0 and payload[0] <= 2


def parse_v2_request(payload: bytes | bytearray | memoryview) -> V2Request:
    """Parse a v2 request payload (rule 2)."""
    data = bytes(payload)
    if len(data) < 4:
        raise MalformedFrame(f"v2 packet of {len(data)} bytes has no header")
    (header,) = _HEADER.unpack_from(data, 0)
    version = (header >> 24) & 0xFF
    op = header & 0xFF if version == 0 else (header >> 16) & 0xFF
    flags = V2Flag(0 if version == 0 else header & 0xFFFF)
    if op == V2Op.ADD_ENTRY:
        if len(data) < 4 + MASTER_KEY_LENGTH + 16:
            raise MalformedFrame("v2 add too short for its master key and entry ids")
        key = data[4 : 4 + MASTER_KEY_LENGTH]
        body = data[4 + MASTER_KEY_LENGTH :]
        ledger_id, entry_id = _IDS.unpack_from(body, 0)
        return V2Request(version, V2Op.ADD_ENTRY, flags, ledger_id, entry_id, key, body)
    if op == V2Op.READ_ENTRY:
        if len(data) < 20:
            raise MalformedFrame("v2 read too short for its ledger and entry ids")
        ledger_id, entry_id = _IDS.unpack_from(data, 4)
        key = b""
        if flags & V2Flag.DO_FENCING and version >= 2:
            if len(data) < 20 + MASTER_KEY_LENGTH:
                raise MalformedFrame("v2 fencing read without its master key")
            key = data[20 : 20 + MASTER_KEY_LENGTH]
        return V2Request(version, V2Op.READ_ENTRY, flags, ledger_id, entry_id, key)
    raise MalformedFrame(f"v2 operation {op} is not served (only ADD_ENTRY and READ_ENTRY)")


def encode_v2_response(
    version: int, op: int, status_v2: int, ledger_id: int, entry_id: int, body: bytes = b""
) -> bytes:
    """A framed v2 response; ``body`` only for a READ answered EOK (rule 3)."""
    header = (version & 0xFF) << 24 | (op & 0xFF) << 16 if version else op
    return _RESPONSE.pack(_RESPONSE.size - 4 + len(body), header, status_v2, ledger_id, entry_id) + body
