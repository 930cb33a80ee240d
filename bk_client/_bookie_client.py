"""Requests to one named bookie, below ledger handles (BookKeeper's ``BookieClient``).

Ledger handles choose bookies themselves (write sets, failover, ensemble changes). Tools that
repair replicas need the level below: read the entry one particular bookie stores, and store
an entry on one particular bookie. ``BookieClient`` is that seam, over a client's pooled
connections; AutoRecovery's replication workers (``autorecovery``) use it through
``BookKeeper.bookie_client``.

Guarantees: every request goes over the client's connection to that bookie (the same request
ids, backoff and lifetime as the client's own requests) and waits at most the client config's
timeout for its kind (``read_entry_timeout_s``, ``add_entry_timeout_s``; a stall of the event
loop is not taken for the bookie's silence, see ``bk_client._deadline``), after which the request
is forgotten and ``Timeout`` raised. Nothing is retried or sent to another bookie.
"""

from __future__ import annotations

from protocols.bookkeeper import DigestMismatch as ProtocolDigestMismatch
from protocols.bookkeeper import (
    DigestType,
    LedgerMetadata,
    StatusCode,
    add_request,
    digest_for,
    encode_request,
    read_request,
)

from ._errors import BKError, DigestMismatch, Timeout, error_for_bookie_status
from ._transport import BookieTransport, call_within

__all__ = ["BookieClient"]


class BookieClient:
    """Reads and recovery adds addressed to one bookie each (module docstring). Built by the
    client (``BookKeeper.bookie_client``); it lives as long as the client, and every call raises
    ``ClientClosed`` once the client closed."""

    __slots__ = ("_pool",)

    def __init__(self, pool: BookieTransport) -> None:
        self._pool = pool

    def is_down(self, bookie: str) -> bool:
        """True while the client's connection to ``bookie`` is in reconnect backoff: a request
        to it now would fail at once with ``BookieUnavailable`` (callers try it last)."""
        return self._pool.is_down(bookie)

    async def read_entry(
        self, bookie: str, ledger_id: int, entry_id: int, *, metadata: LedgerMetadata | None = None
    ) -> bytes:
        """The digest-framed entry exactly as ``bookie`` stores it, its digest verified against
        ``ledger_id`` and ``entry_id`` (the bytes are returned unchanged, to be forwarded) with the
        digest type and password of the ledger's ``metadata`` (CRC32C when it is not given).

        Raises ``NoSuchEntry`` / ``NoSuchLedger`` when the bookie does not have it, ``ReadError``
        or another ``BKError`` for its error status, ``DigestMismatch`` for a corrupt copy,
        ``BookieUnavailable`` / ``TooManyRequests`` / ``ClientClosed`` from the connection and
        ``Timeout`` after ``read_entry_timeout_s``.
        """
        pool = self._pool
        txn = pool.next_txn()
        frame = encode_request(read_request(txn, ledger_id, entry_id))
        response = await call_within(pool.get(bookie), txn, frame, pool.config.read_entry_timeout_s)
        if response is None:
            raise Timeout(
                f"bookie {bookie} did not answer a read of entry {entry_id} of ledger {ledger_id}", ledger_id=ledger_id
            )
        r = response.readResponse
        status = r.status if response.HasField("readResponse") else response.status
        if status != StatusCode.EOK or not r.HasField("body"):
            raise (
                error_for_bookie_status(
                    status or StatusCode.EIO, ledger_id=ledger_id, entry_id=entry_id, bookie_id=bookie, reading=True
                )
                or BKError()
            )
        body = bytes(r.body)
        try:
            if metadata is None:
                digest = digest_for(DigestType.CRC32C)
            else:
                digest = digest_for(metadata.digest_type, metadata.password)
            digest.decode_entry(body, ledger_id, entry_id)
        except ProtocolDigestMismatch as exc:
            raise DigestMismatch(
                f"entry {entry_id} of ledger {ledger_id} from {bookie}: {exc}", ledger_id=ledger_id
            ) from exc
        return body

    async def recovery_add(self, bookie: str, ledger_id: int, entry_id: int, master_key: bytes, body: bytes) -> None:
        """Store the digest-framed ``body`` as ``entry_id`` on ``bookie`` with RECOVERY_ADD, which a
        fenced or closed ledger still accepts; returns once the bookie acknowledged it.
        ``master_key`` is the ledger's (``bk_client.master_key(password)``).

        Raises the ``BKError`` for the bookie's error status (``Unauthorized`` for a wrong key,
        ``WriteError``, ...), ``BookieUnavailable`` / ``TooManyRequests`` / ``ClientClosed`` from
        the connection and ``Timeout`` after ``add_entry_timeout_s``.
        """
        pool = self._pool
        txn = pool.next_txn()
        frame = encode_request(add_request(txn, ledger_id, entry_id, master_key, body, recovery=True))
        response = await call_within(pool.get(bookie), txn, frame, pool.config.add_entry_timeout_s)
        if response is None:
            raise Timeout(
                f"bookie {bookie} did not answer the recovery add of entry {entry_id} of ledger {ledger_id}",
                ledger_id=ledger_id,
            )
        status = response.addResponse.status if response.HasField("addResponse") else response.status
        error = error_for_bookie_status(status, ledger_id=ledger_id, entry_id=entry_id, bookie_id=bookie)
        if error is not None:
            raise error
