"""Hand-written encoders for the two frames of the add path: the add request and its answer.

Pure functions, byte-identical to ``encode_request(add_request(...))`` and
``encode_response(add_response(...))`` (tests check both across varint sizes and negative ids).

Why not protobuf: building and serialising a message costs ~4 us, over a tenth of an add's whole
budget at full rate. Reusing one message per ledger instead (refilling its fields per add) is
worse: the upb runtime keeps every bytes value ever assigned to a message in the message's arena
until the message dies, so a reused add request held a copy of every entry written to its ledger
(RSS grew by the bytes written, up to a ledger's size). These encoders allocate only the frame.

Field numbers (``protocols/bookkeeper/bookie_protocol.proto``): Request.header = 1,
Request.addRequest = 101; Response.header = 1, Response.status = 2, Response.addResponse = 101;
BKPacketHeader.version = 1, .operation = 2, .txnId = 3; AddRequest.ledgerId = 1, .entryId = 2,
.masterKey = 3, .body = 4, .flag = 100; AddResponse.status = 1, .ledgerId = 2, .entryId = 3.
"""

from __future__ import annotations

import functools

from ._digest import ENTRY_HEADER_SIZE

__all__ = ["AddRequestEncoder", "encode_add_response", "max_add_payload"]

_HEADER_PREFIX = b"\x08\x03\x10\x02\x18"  # version 3, operation ADD_ENTRY (2), then the txnId tag
_RECOVERY_FLAG = b"\xa0\x06\x01"  # AddRequest.flag (field 100, varint) = RECOVERY_ADD
_SMALL = [bytes((i,)) for i in range(128)]
_LEN = [i.to_bytes(4, "big") for i in range(128)]
# "08 status 10 ledgerId 18" per (status, ledger): a connection answers few ledgers, many entries
_ADD_PREFIX: dict[tuple[int, int], bytes] = {}
_ADD_PREFIX_MAX = 4096


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _SMALL[value]
    if 0 < value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if 0 < value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    if value < 0:
        value += 1 << 64  # negative int64 / enum values are 10-byte two's complement varints
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_add_response(txn_id: int, status: int, ledger_id: int, entry_id: int) -> bytes:
    """The framed ``[length u32][Response]`` answering an add, as the protobuf encoder writes it."""
    key = (status, ledger_id)
    prefix = _ADD_PREFIX.get(key)
    if prefix is None:
        if len(_ADD_PREFIX) >= _ADD_PREFIX_MAX:
            _ADD_PREFIX.clear()
        prefix = _ADD_PREFIX[key] = b"\x08" + _varint(status) + b"\x10" + _varint(ledger_id) + b"\x18"
    add = prefix + _varint(entry_id)
    txn = _varint(txn_id)
    st = _SMALL[status] if 0 <= status < 0x80 else _varint(status)
    # header = _HEADER_PREFIX + txn (6-15 bytes); every length here is < 128: one byte each
    body_len = 11 + len(txn) + len(st) + len(add)
    return b"".join(
        (
            _LEN[body_len],
            b"\x0a",
            _SMALL[5 + len(txn)],
            _HEADER_PREFIX,
            txn,
            b"\x10",
            st,
            b"\xaa\x06",
            _SMALL[len(add)],
            add,
        )
    )


class AddRequestEncoder:
    """Frames the ADD_ENTRY requests of one ledger: ``encode(txn, entry, body)`` returns what
    ``encode_request(add_request(txn, ledger_id, entry, master_key, body, recovery=recovery))``
    returns, with the per-ledger parts (ledger id, master key, flag) encoded once."""

    __slots__ = ("_ledger", "_key", "_flag")

    def __init__(self, ledger_id: int, master_key: bytes, *, recovery: bool = False) -> None:
        self._ledger = b"\x08" + _varint(ledger_id)
        self._key = b"\x1a" + _varint(len(master_key)) + master_key
        self._flag = _RECOVERY_FLAG if recovery else b""

    def encode(self, txn_id: int, entry_id: int, body: bytes) -> bytes:
        """One framed request; ``body`` is the digest-framed entry."""
        txn = _varint(txn_id)
        eid = _varint(entry_id)
        blen = _varint(len(body))
        add_len = len(self._ledger) + 1 + len(eid) + len(self._key) + 1 + len(blen) + len(body) + len(self._flag)
        alen = _varint(add_len)
        header_len = len(_HEADER_PREFIX) + len(txn)
        size = 4 + header_len + len(alen) + add_len  # 0x0a, header length, header, 0xaa 0x06, ...
        return b"".join(
            (
                size.to_bytes(4, "big"),
                b"\x0a",
                _SMALL[header_len],
                _HEADER_PREFIX,
                txn,
                b"\xaa\x06",
                alen,
                self._ledger,
                b"\x10",
                eid,
                self._key,
                b"\x22",
                blen,
                body,
                self._flag,
            )
        )


@functools.lru_cache(maxsize=64)  # asked per add on the write path; a few distinct limits per process
def max_add_payload(max_frame_size: int, master_key_size: int = 20, header_size: int = ENTRY_HEADER_SIZE) -> int:
    """The largest entry payload whose ADD_ENTRY frame (length prefix, request, digest header of
    ``header_size`` bytes: ``EntryDigest.header_size``, CRC32C's by default) is at most
    ``max_frame_size`` bytes, whatever the txn, ledger and entry ids and with or without the
    recovery flag; BookKeeper master keys are SHA-1 digests (20 bytes). Negative when even an
    empty entry does not fit."""
    worst = AddRequestEncoder(-1, b"k" * master_key_size, recovery=True).encode(2**64 - 1, -1, b"")
    # the empty body's length varint is 1 byte; a body of up to 2^35 bytes needs 5
    return max_frame_size - len(worst) - 4 - header_size
