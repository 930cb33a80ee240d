"""Pulsar's key hashing for Key_Shared dispatch.

Pulsar hashes a message's sticky key with MurmurHash3 x86 32-bit (seed 0) over its bytes,
clears the sign bit (``& Integer.MAX_VALUE``) and takes the result modulo the hash range
(65536 by default); consumers own ranges of those slots. The sticky key is the ordering key
if set, else the partition key (base64-decoded when flagged so), else ``"NONE_KEY"``.
"""

from __future__ import annotations

import base64
import binascii
import struct

from .pulsar_api_pb2 import MessageMetadata

#: Pulsar's default Key_Shared hash range size (slots 0..65535).
DEFAULT_HASH_RANGE_SIZE = 65536
NONE_KEY = b"NONE_KEY"

_M32 = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593


def _scramble(k: int) -> int:
    k = (k * _C1) & _M32
    k = ((k << 15) | (k >> 17)) & _M32
    return (k * _C2) & _M32


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit of ``data`` as an unsigned int (0 <= h < 2**32)."""
    length = len(data)
    h = seed & _M32
    blocks = length // 4
    for k in struct.unpack_from(f"<{blocks}I", data):
        h ^= _scramble(k)
        h = ((h << 13) | (h >> 19)) & _M32
        h = (h * 5 + 0xE6546B64) & _M32
    tail = data[blocks * 4 :]
    if tail:
        h ^= _scramble(int.from_bytes(tail, "little"))
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h


def key_hash(key: str | bytes) -> int:
    """Pulsar's ``Murmur3_32Hash.makeHash``: murmur3 of the (UTF-8) key with the sign bit cleared."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    return murmur3_32(key) & 0x7FFFFFFF


def key_hash_slot(key: str | bytes, range_size: int = DEFAULT_HASH_RANGE_SIZE) -> int:
    """The Key_Shared slot of a key: ``key_hash(key) % range_size``."""
    return key_hash(key) % range_size


def sticky_key(metadata: MessageMetadata) -> bytes:
    """The bytes a Key_Shared dispatcher hashes for a message (or a whole batch entry).

    Ordering key, else partition key (base64-decoded when ``partition_key_b64_encoded``; an
    undecodable one falls back to ``NONE_KEY`` as Pulsar does on any error), else ``NONE_KEY``.
    """
    if metadata.HasField("ordering_key"):
        return metadata.ordering_key
    if metadata.HasField("partition_key"):
        if metadata.partition_key_b64_encoded:
            try:
                return base64.b64decode(metadata.partition_key, validate=True)
            except (binascii.Error, ValueError):
                return NONE_KEY
        return metadata.partition_key.encode("utf-8")
    return NONE_KEY


__all__ = ["DEFAULT_HASH_RANGE_SIZE", "NONE_KEY", "key_hash", "key_hash_slot", "murmur3_32", "sticky_key"]
