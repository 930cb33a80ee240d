"""Ending a transaction on topics another broker serves: END_TXN_ON_PARTITION and
END_TXN_ON_SUBSCRIPTION sent to the topic's owner over the binary protocol, as Pulsar's
coordinator does through its transaction-buffer client.

Rules:

* Rule 1: one connection per owner broker URL (at most one per broker of the cluster), opened on
  first use with this broker's own credentials (``brokerClientAuthenticationPlugin``, TLS when
  the URL is ``pulsar+ssl://``) and dropped on any failure; requests on it go one at a time.
* Rule 2: a request gets its answer within ``request_timeout_s`` or fails with ServiceNotReady
  (the coordinator retries); an answer carrying an error raises it with its code.
"""

from __future__ import annotations

import itertools
import ssl
from typing import Any

import trio

from protocols.pulsar import FrameDecoder, command_body, encode_command, make_command
from protocols.pulsar import pulsar_api_pb2 as pb

from ..._errors import BrokerServiceError, ServiceNotReadyError
from .._txnid import TxnAction, TxnID

__all__ = ["RemoteParticipants"]


class _BrokerConnection:
    """One connection to another broker (Rule 1): CONNECTed, then request by request."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self._decoder = FrameDecoder()
        self._ids = itertools.count(1)

    @classmethod
    async def open(cls, url: str, ssl_context: ssl.SSLContext, auth: tuple[str, bytes]) -> _BrokerConnection:
        scheme, _, address = url.partition("://")
        host, _, port = address.rstrip("/").rpartition(":")
        stream: trio.abc.Stream = await trio.open_tcp_stream(host, int(port))
        if scheme == "pulsar+ssl":
            tls = trio.SSLStream(stream, ssl_context, server_hostname=host)
            await tls.do_handshake()
            stream = tls
        conn = cls(stream)
        method, data = auth
        fields: dict[str, Any] = {"client_version": "magnetar-broker", "protocol_version": 20}
        if method:
            fields.update(auth_method_name=method, auth_data=data)
        await conn._send(make_command("CONNECT", **fields))
        answer = await conn._receive()
        if answer.type == pb.BaseCommand.ERROR:
            await conn.close()
            raise BrokerServiceError(f"{url} refused this broker: {answer.error.message}", answer.error.error)
        if answer.type != pb.BaseCommand.CONNECTED:
            await conn.close()
            raise ServiceNotReadyError(f"{url} answered CONNECT with {pb.BaseCommand.Type.Name(answer.type)}")
        return conn

    async def _send(self, command: pb.BaseCommand) -> None:
        await self._stream.send_all(encode_command(command))

    async def _receive(self) -> pb.BaseCommand:
        while True:
            frame = self._decoder.next_frame()
            if frame is not None:
                if frame.type == pb.BaseCommand.PING:
                    await self._send(make_command("PONG"))
                    continue
                return frame.command
            data = await self._stream.receive_some(65536)
            if not data:
                raise ServiceNotReadyError("the other broker closed the connection")
            self._decoder.feed(data)

    async def request(self, type_: str, **fields: Any) -> Any:
        """Send ``type_`` with a fresh request id; return the body of its answer (Rule 2)."""
        request_id = next(self._ids)
        await self._send(make_command(type_, request_id=request_id, **fields))
        while True:
            answer = await self._receive()
            body: Any = command_body(answer)
            if body is None or getattr(body, "request_id", None) != request_id:
                continue
            if answer.type == pb.BaseCommand.ERROR:
                raise BrokerServiceError(body.message, body.error)
            if body.HasField("error"):
                raise BrokerServiceError(body.message, body.error)
            return body

    async def close(self) -> None:
        with trio.CancelScope(shield=True):
            try:
                await self._stream.aclose()
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                pass


class RemoteParticipants:
    """The topics of other brokers as `TxnParticipant` calls (module rules)."""

    def __init__(
        self, ssl_context: ssl.SSLContext, auth: tuple[str, bytes], *, request_timeout_s: float = 10.0
    ) -> None:
        self._ssl = ssl_context
        self._auth = auth
        self.request_timeout_s = request_timeout_s
        self._connections: dict[str, _BrokerConnection] = {}
        self._locks: dict[str, trio.Lock] = {}

    async def _request(self, url: str, type_: str, **fields: Any) -> None:
        lock = self._locks.setdefault(url, trio.Lock())
        async with lock:
            conn = self._connections.get(url)
            try:
                with trio.fail_after(self.request_timeout_s):
                    if conn is None:
                        conn = self._connections[url] = await _BrokerConnection.open(url, self._ssl, self._auth)
                    await conn.request(type_, **fields)
            except BrokerServiceError as exc:
                if exc.code in (pb.ServiceNotReady, pb.UnknownError):
                    await self._drop(url)
                raise
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
