"""Convenience constructors for bookie requests and responses, and helpers to inspect them.

Callers never build headers by hand: every constructor takes the request id (``txn_id``, echoed
by the response) and the operation's fields, fills the header (protocol version 3, the matching
operation, priority) and returns the protobuf message ready for ``encode_request`` /
``encode_response``. Constructors raise ``ValueError`` for combinations BookKeeper rejects (a
fencing read without a master key, a read that both fences and long-polls).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import bookie_protocol_pb2 as pb
from ._codes import PROTOCOL_VERSION, BookieInfoFlag, OperationType

__all__ = [
    "add_request",
    "add_response",
    "error_response",
    "force_ledger_request",
    "force_ledger_response",
    "get_bookie_info_request",
    "get_bookie_info_response",
    "operation_of",
    "read_lac_request",
    "read_lac_response",
    "read_request",
    "read_response",
    "request_body",
    "response_body",
    "write_lac_request",
    "write_lac_response",
]

# Enum fields: the generated stubs type them as the protobuf enum classes, which no int (nor a
# member of our IntEnums) is, while at run time a field takes any number its enum defines. Values
# bound for such fields go through a local of this type: no call, no copy.
_EnumValue = Any

# operation -> (sub-message field in Request, sub-message field in Response)
_FIELDS: dict[OperationType, tuple[str, str]] = {
    OperationType.READ_ENTRY: ("readRequest", "readResponse"),
    OperationType.ADD_ENTRY: ("addRequest", "addResponse"),
    OperationType.AUTH: ("authRequest", "authResponse"),
    OperationType.WRITE_LAC: ("writeLacRequest", "writeLacResponse"),
    OperationType.READ_LAC: ("readLacRequest", "readLacResponse"),
    OperationType.GET_BOOKIE_INFO: ("getBookieInfoRequest", "getBookieInfoResponse"),
    OperationType.START_TLS: ("startTLSRequest", "startTLSResponse"),
    OperationType.FORCE_LEDGER: ("forceLedgerRequest", "forceLedgerResponse"),
    OperationType.GET_LIST_OF_ENTRIES_OF_LEDGER: (
        "getListOfEntriesOfLedgerRequest",
        "getListOfEntriesOfLedgerResponse",
    ),
}


def _header(header: pb.BKPacketHeader, op: OperationType, txn_id: int, priority: int) -> None:
    if not 0 <= txn_id < 2**64:
        raise ValueError(f"txn_id {txn_id} is not a u64")
    version: _EnumValue = PROTOCOL_VERSION
    operation: _EnumValue = op
    header.version = version
    header.operation = operation
    header.txnId = txn_id
    if priority:
        header.priority = priority


def _request(op: OperationType, txn_id: int, priority: int, context: Iterable[tuple[str, str]] = ()) -> pb.Request:
    req = pb.Request()
    _header(req.header, op, txn_id, priority)
    for key, value in context:
        req.requestContext.add(key=key, value=value)
    return req


def _response(op: OperationType, txn_id: int, status: int) -> pb.Response:
    resp = pb.Response()
    _header(resp.header, op, txn_id, 0)
    wire_status: _EnumValue = status
    resp.status = wire_status
    return resp


# ---------------------------------------------------------------- requests


def add_request(
    txn_id: int,
    ledger_id: int,
    entry_id: int,
    master_key: bytes,
    body: bytes,
    *,
    recovery: bool = False,
    write_flags: int | None = None,
    priority: int = 0,
    context: Iterable[tuple[str, str]] = (),
) -> pb.Request:
    """ADD_ENTRY of ``body`` (the digest-framed entry) to ``ledger_id``/``entry_id``.

    ``recovery=True`` sets RECOVERY_ADD, which a fenced ledger still accepts.
    """
    req = _request(OperationType.ADD_ENTRY, txn_id, priority, context)
    add = req.addRequest
    add.ledgerId = ledger_id
    add.entryId = entry_id
    add.masterKey = master_key
    add.body = body
    if recovery:
        add.flag = pb.AddRequest.RECOVERY_ADD
    if write_flags is not None:
        add.writeFlags = write_flags
    return req


def read_request(
    txn_id: int,
    ledger_id: int,
    entry_id: int,
    *,
    fence: bool = False,
    master_key: bytes | None = None,
    piggyback: bool = False,
    previous_lac: int | None = None,
    timeout_ms: int | None = None,
    priority: int = 0,
    context: Iterable[tuple[str, str]] = (),
) -> pb.Request:
    """READ_ENTRY of ``entry_id`` (``-1`` reads the last add confirmed entry).

    ``fence=True`` sets FENCE_LEDGER and requires ``master_key`` (``ValueError`` otherwise).
    ``piggyback=True`` sets ENTRY_PIGGYBACK: the response carries the bookie's max LAC, and with
    ``previous_lac`` (+ ``timeout_ms``) the bookie holds the read until its LAC passes it.
    A read cannot both fence and piggyback (the flag is a single enum): ``ValueError``.
    """
    if fence and piggyback:
        raise ValueError("a read is either a fencing read or a piggyback read, not both")
    if fence and master_key is None:
        raise ValueError("a fencing read needs the ledger's master key")
    if previous_lac is not None and not piggyback:
        raise ValueError("previous_lac (long poll) needs piggyback=True")
    req = _request(OperationType.READ_ENTRY, txn_id, priority, context)
    read = req.readRequest
    read.ledgerId = ledger_id
    read.entryId = entry_id
    if fence:
        read.flag = pb.ReadRequest.FENCE_LEDGER
    elif piggyback:
        read.flag = pb.ReadRequest.ENTRY_PIGGYBACK
    if master_key is not None:
        read.masterKey = master_key
    if previous_lac is not None:
        read.previousLAC = previous_lac
    if timeout_ms is not None:
        read.timeOut = timeout_ms
    return req


def read_lac_request(txn_id: int, ledger_id: int, *, priority: int = 0) -> pb.Request:
    """READ_LAC: the last LAC written with WRITE_LAC and the last stored entry of the ledger."""
    req = _request(OperationType.READ_LAC, txn_id, priority)
    req.readLacRequest.ledgerId = ledger_id
    return req


def write_lac_request(
    txn_id: int, ledger_id: int, lac: int, master_key: bytes, body: bytes, *, priority: int = 0
) -> pb.Request:
    """WRITE_LAC of ``lac`` with ``body`` the digest-framed LAC (``encode_lac``)."""
    req = _request(OperationType.WRITE_LAC, txn_id, priority)
    w = req.writeLacRequest
    w.ledgerId = ledger_id
    w.lac = lac
    w.masterKey = master_key
    w.body = body
    return req


def force_ledger_request(txn_id: int, ledger_id: int, *, priority: int = 0) -> pb.Request:
    """FORCE_LEDGER: make every entry of ``ledger_id`` added so far durable (fsync)."""
    req = _request(OperationType.FORCE_LEDGER, txn_id, priority)
    req.forceLedgerRequest.ledgerId = ledger_id
    return req


def get_bookie_info_request(
    txn_id: int,
    requested: int = BookieInfoFlag.TOTAL_DISK_CAPACITY | BookieInfoFlag.FREE_DISK_SPACE,
    *,
    priority: int = 0,
) -> pb.Request:
    """GET_BOOKIE_INFO for the ``BookieInfoFlag`` bits in ``requested`` (both by default)."""
    req = _request(OperationType.GET_BOOKIE_INFO, txn_id, priority)
    req.getBookieInfoRequest.requested = int(requested)
    return req


# ---------------------------------------------------------------- responses


def add_response(txn_id: int, status: int, ledger_id: int, entry_id: int) -> pb.Response:
    """Answer to ADD_ENTRY; the top-level and the add status are both ``status``."""
    resp = _response(OperationType.ADD_ENTRY, txn_id, status)
    resp.addResponse.status = resp.status
    resp.addResponse.ledgerId = ledger_id
    resp.addResponse.entryId = entry_id
    return resp


def read_response(
    txn_id: int,
    status: int,
    ledger_id: int,
    entry_id: int,
    *,
    body: bytes | None = None,
    max_lac: int | None = None,
    lac_update_timestamp: int | None = None,
) -> pb.Response:
    """Answer to READ_ENTRY: ``body`` is the stored entry, ``max_lac`` the piggybacked LAC."""
    resp = _response(OperationType.READ_ENTRY, txn_id, status)
    r = resp.readResponse
    r.status = resp.status
    r.ledgerId = ledger_id
    r.entryId = entry_id
    if body is not None:
        r.body = body
    if max_lac is not None:
        r.maxLAC = max_lac
    if lac_update_timestamp is not None:
        r.lacUpdateTimestamp = lac_update_timestamp
    return resp


def read_lac_response(
    txn_id: int, status: int, ledger_id: int, *, lac_body: bytes | None = None, last_entry_body: bytes | None = None
) -> pb.Response:
    """Answer to READ_LAC: the last WRITE_LAC body and/or the last stored entry."""
    resp = _response(OperationType.READ_LAC, txn_id, status)
    r = resp.readLacResponse
    r.status = resp.status
    r.ledgerId = ledger_id
    if lac_body is not None:
        r.lacBody = lac_body
    if last_entry_body is not None:
        r.lastEntryBody = last_entry_body
    return resp


def write_lac_response(txn_id: int, status: int, ledger_id: int) -> pb.Response:
    """Answer to WRITE_LAC."""
    resp = _response(OperationType.WRITE_LAC, txn_id, status)
    resp.writeLacResponse.status = resp.status
    resp.writeLacResponse.ledgerId = ledger_id
    return resp


def force_ledger_response(txn_id: int, status: int, ledger_id: int) -> pb.Response:
    """Answer to FORCE_LEDGER."""
    resp = _response(OperationType.FORCE_LEDGER, txn_id, status)
    resp.forceLedgerResponse.status = resp.status
    resp.forceLedgerResponse.ledgerId = ledger_id
    return resp


def get_bookie_info_response(
    txn_id: int, status: int, *, total_disk_capacity: int | None = None, free_disk_space: int | None = None
) -> pb.Response:
    """Answer to GET_BOOKIE_INFO; sizes in bytes, omitted when not requested."""
    resp = _response(OperationType.GET_BOOKIE_INFO, txn_id, status)
    r = resp.getBookieInfoResponse
    r.status = resp.status
    if total_disk_capacity is not None:
        r.totalDiskCapacity = total_disk_capacity
    if free_disk_space is not None:
        r.freeDiskSpace = free_disk_space
    return resp


def error_response(request: pb.Request, status: int) -> pb.Response:
    """A response to ``request`` with ``status`` (usually an error), whatever its operation.

    Echoes the txnId and operation and fills the matching sub-response with the ids the request
    carried, as BookKeeper does. For an operation without a sub-response (or with the request's
    sub-message missing) only the top-level status is set: EBADREQ is the usual answer there.
    """
    op = int(request.header.operation)
    txn = request.header.txnId
    resp = pb.Response()
    version: _EnumValue = PROTOCOL_VERSION
    operation: _EnumValue = op
    wire_status: _EnumValue = status
    resp.header.version = version
    resp.header.operation = operation
    resp.header.txnId = txn
    resp.status = wire_status
    if op not in _FIELDS:
        return resp
    req_field, resp_field = _FIELDS[OperationType(op)]
    if not request.HasField(req_field):
        return resp
    sub_req = getattr(request, req_field)
    sub = getattr(resp, resp_field)
    if op == OperationType.AUTH:
        sub.authPluginName = sub_req.authPluginName
        sub.payload = b""
        return resp
    if op == OperationType.START_TLS:
        sub.SetInParent()
        return resp
    sub.status = status
    if op != OperationType.GET_BOOKIE_INFO:
        sub.ledgerId = sub_req.ledgerId
    if op in (OperationType.READ_ENTRY, OperationType.ADD_ENTRY):
        sub.entryId = sub_req.entryId
    return resp


# ---------------------------------------------------------------- inspection


def operation_of(msg: pb.Request | pb.Response) -> OperationType | int:
    """The header's operation as an ``OperationType`` (the raw int if unknown to Magnetar)."""
    op = msg.header.operation
    try:
        return OperationType(op)
    except ValueError:
        return op


def request_body(request: pb.Request) -> Any:
    """The sub-request matching the header's operation, or ``None`` when it is missing.

    A request whose sub-message is missing or whose operation is not served is a bad request
    (answer ``error_response(request, StatusCode.EBADREQ)``).
    """
    op = operation_of(request)
    fields = _FIELDS.get(op) if isinstance(op, OperationType) else None
    if fields is None or not request.HasField(fields[0]):
        return None
    return getattr(request, fields[0])


def response_body(response: pb.Response) -> Any:
    """The sub-response matching the header's operation, or ``None`` when it is missing."""
    op = operation_of(response)
    fields = _FIELDS.get(op) if isinstance(op, OperationType) else None
    if fields is None or not response.HasField(fields[1]):
        return None
    return getattr(response, fields[1])
