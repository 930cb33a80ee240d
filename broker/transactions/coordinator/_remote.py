"""Ending a transaction on topics another broker serves: END_TXN_ON_PARTITION and
END_TXN_ON_SUBSCRIPTION sent to the topic's owner over the binary protocol, as Pulsar's
coordinator does through its transaction-buffer client. The connections are the broker's one
binary-protocol client, `broker.cluster._binary_client`, read by tasks of `RemoteParticipants.run`.

Rules:

* Rule 1: one connection per owner broker URL (at most one per broker of the cluster), opened on
  first use with this broker's own credentials (``brokerClientAuthenticationPlugin``, TLS when
  the URL is ``pulsar+ssl://``) and dropped on any failure (a lost connection as soon as its read
  loop sees it); requests on it go one at a time. Connections open only while `run` runs (else
  ServiceNotReady), and all close when it ends.
* Rule 2: a request gets its answer within ``request_timeout_s`` or fails with ServiceNotReady
  (the coordinator retries); an answer carrying an error raises it with its code, as does a
  refused CONNECT.
"""

from __future__ import annotations

import ssl
from typing import Any

import trio

from protocols.pulsar import command_body, make_command
from protocols.pulsar import pulsar_api_pb2 as pb

from ..._errors import BrokerServiceError, ServiceNotReadyError
from ...cluster._binary_client import BrokerConnection, BrokerConnectionError, connect_broker, parse_broker_urls
from .._txnid import TxnAction, TxnID

__all__ = ["RemoteParticipants"]

_CLIENT_VERSION = "magnetar-broker"


class RemoteParticipants:
    """The topics of other brokers as `TxnParticipant` calls (module rules)."""

    def __init__(
        self, ssl_context: ssl.SSLContext, auth: tuple[str, bytes], *, request_timeout_s: float = 10.0
    ) -> None:
        self._ssl = ssl_context
        self._auth = auth
        self.request_timeout_s = request_timeout_s
        self._connections: dict[str, BrokerConnection] = {}
        self._locks: dict[str, trio.Lock] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the connections' read loops until cancelled (Rule 1); closes every connection on
        the way out."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            await self.close()

    async def _open(self, url: str) -> BrokerConnection:
        nursery = self._nursery
        if nursery is None:
            raise ServiceNotReadyError(f"cannot reach {url}: the coordinators are not running")
        host, port = parse_broker_urls(url)[0]
        conn = await connect_broker(
            host,
            port,
            nursery,
            credentials=self._auth,
            ssl_context=self._ssl if url.startswith("pulsar+ssl://") else None,
            client_version=_CLIENT_VERSION,
            timeout_s=self.request_timeout_s,
        )

        def lost(_: BrokerConnectionError) -> None:
            if self._connections.get(url) is conn:
                del self._connections[url]
            nursery.start_soon(conn.close)

        conn.on_lost = lost
        return conn

    async def _request(self, url: str, type_: str, **fields: Any) -> None:
        lock = self._locks.setdefault(url, trio.Lock())
        async with lock:
            conn = self._connections.get(url)
            try:
                with trio.fail_after(self.request_timeout_s):
                    if conn is None:
                        conn = self._connections[url] = await self._open(url)
                    request_id = conn.next_id()
                    answer = await conn.request(
                        make_command(type_, request_id=request_id, **fields),
                        request_id,
                        timeout_s=self.request_timeout_s,
                    )
                body: Any = command_body(answer)
                if answer.type == pb.BaseCommand.ERROR or body.HasField("error"):
                    raise BrokerServiceError(body.message, body.error)
            except BrokerServiceError as exc:
                if exc.code in (pb.ServiceNotReady, pb.UnknownError):
                    await self._drop(url)
                raise
            except BrokerConnectionError as exc:
                await self._drop(url)
                if exc.code is not None:  # CONNECT refused: its reason and code
                    raise BrokerServiceError(f"{url} refused this broker: {exc}", exc.code) from None
                raise ServiceNotReadyError(f"{type_} to {url} failed: {exc}") from exc
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError) as exc:
                await self._drop(url)
                raise ServiceNotReadyError(f"{type_} to {url} failed: {exc or type(exc).__name__}") from exc

    async def _drop(self, url: str) -> None:
        conn = self._connections.pop(url, None)
        if conn is not None:
            await conn.close()

    async def end_txn_on_partition(self, url: str, topic: str, txn: TxnID, action: TxnAction) -> None:
        """END_TXN_ON_PARTITION to the broker at ``url``."""
        await self._request(
            url,
            "END_TXN_ON_PARTITION",
            txnid_most_bits=txn.most_bits,
            txnid_least_bits=txn.least_bits,
            topic=topic,
            txn_action=int(action),
        )

    async def end_txn_on_subscription(
        self, url: str, topic: str, subscription: str, txn: TxnID, action: TxnAction
    ) -> None:
        """END_TXN_ON_SUBSCRIPTION to the broker at ``url``."""
        await self._request(
            url,
            "END_TXN_ON_SUBSCRIPTION",
            txnid_most_bits=txn.most_bits,
            txnid_least_bits=txn.least_bits,
            subscription={"topic": topic, "subscription": subscription},
            txn_action=int(action),
        )

    async def close(self) -> None:
        """Close every connection."""
        for url in list(self._connections):
            await self._drop(url)
