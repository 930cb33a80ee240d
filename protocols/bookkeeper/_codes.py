"""Bookie protocol enums as Python ``IntEnum`` s, equal by value to the protobuf enums.

The generated ``bookie_protocol_pb2`` enums are plain ints; these give callers names, ``repr``
and exhaustiveness (``StatusCode.EFENCED``) while staying interchangeable with the protobuf
fields (an ``IntEnum`` is an ``int``). A test checks that every name and number matches the
``.proto``.
"""

from __future__ import annotations

import enum

__all__ = ["PROTOCOL_VERSION", "BookieInfoFlag", "OperationType", "StatusCode", "WriteFlag"]

PROTOCOL_VERSION = 3
"""The protocol version Magnetar speaks (BookKeeper's VERSION_THREE)."""


class StatusCode(enum.IntEnum):
    """BookKeeper status codes with BookKeeper's numbers: 4xx request errors, 5xx I/O or access."""

    EOK = 0
    ENOLEDGER = 402
    ENOENTRY = 403
    EBADREQ = 404
    EIO = 501
    EUA = 502  # unauthorized: the master key does not match the ledger's
    EBADVERSION = 503
    EFENCED = 504
    EREADONLY = 505
    ETOOMANYREQUESTS = 506
    EUNKNOWNLEDGERSTATE = 507


class OperationType(enum.IntEnum):
    """Operation carried in a packet header, with BookKeeper's numbers."""

    READ_ENTRY = 1
    ADD_ENTRY = 2
    RANGE_READ_ENTRY = 3
    RANGE_ADD_ENTRY = 4
    AUTH = 5
    WRITE_LAC = 6
    READ_LAC = 7
    GET_BOOKIE_INFO = 8
    START_TLS = 9
    FORCE_LEDGER = 10
    GET_LIST_OF_ENTRIES_OF_LEDGER = 11
    BATCH_READ_ENTRY = 12


class BookieInfoFlag(enum.IntFlag):
    """What a GET_BOOKIE_INFO request asks for (bitwise OR in ``requested``)."""

    TOTAL_DISK_CAPACITY = 0x01
    FREE_DISK_SPACE = 0x02


class WriteFlag(enum.IntFlag):
    """``AddRequest.writeFlags`` bits. DEFERRED_SYNC: ack before the journal fsync."""

    NONE = 0
    DEFERRED_SYNC = 0x01
