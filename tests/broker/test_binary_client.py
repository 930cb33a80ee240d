"""`broker.cluster._binary_client`, the broker's one client of the binary protocol to another
broker, against a scripted fake broker on a loopback port: CONNECT refused with its code, answers
matched by request id, PING answered, other commands to the hook, and a dropped connection failing
the waiting request and reporting the loss once."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

import pytest
import trio

from broker.cluster._binary_client import BrokerConnectionError, connect_broker, parse_broker_urls
from protocols.pulsar import BaseCommand, FrameDecoder, encode_command, make_command
from protocols.pulsar import pulsar_api_pb2 as pb

Script = Callable[[trio.SocketStream, "_Reader"], Awaitable[None]]


class _Reader:
    """The fake broker's side: the commands the client writes, one at a time."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()

    async def next(self) -> BaseCommand:
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame.command
            data = await self.stream.receive_some(65536)
            assert data, "the client closed the connection"
            self.decoder.feed(data)


async def _serve(nursery: trio.Nursery, script: Script) -> int:
    async def handler(stream: trio.SocketStream) -> None:
        try:
            await script(stream, _Reader(stream))
        finally:
            await stream.aclose()

    listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    return int(listeners[0].socket.getsockname()[1])


async def _send(stream: trio.SocketStream, name: str, **fields: object) -> None:
    await stream.send_all(encode_command(make_command(name, **fields)))


def test_a_refused_connect_raises_with_the_error_code() -> None:
    seen: list[BaseCommand] = []

    async def script(stream: trio.SocketStream, reader: _Reader) -> None:
        seen.append(await reader.next())
        await _send(stream, "ERROR", request_id=0, error=pb.AuthenticationError, message="who are you")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            port = await _serve(nursery, script)
            with pytest.raises(BrokerConnectionError, match=r"CONNECT.*who are you") as info:
                await connect_broker("127.0.0.1", port, nursery, credentials=("token", b"jwt"), client_version="test")
            assert info.value.code == pb.AuthenticationError
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert seen[0].type == BaseCommand.CONNECT
    assert (seen[0].connect.auth_method_name, seen[0].connect.auth_data) == ("token", b"jwt")


def test_answers_by_request_id_ping_and_the_hook_then_a_drop_fails_the_waiting_request() -> None:
    pongs: list[int] = []

    async def script(stream: trio.SocketStream, reader: _Reader) -> None:
        assert (await reader.next()).type == BaseCommand.CONNECT
        await _send(stream, "CONNECTED", server_version="fake", protocol_version=20)
        await _send(stream, "PING")
        got = {}
        while len(got) < 2:  # the PONG and the first request, in either order
            cmd = await reader.next()
            got[cmd.type] = cmd
        pongs.extend(t for t in got if t == BaseCommand.PONG)
        first = got[BaseCommand.UNSUBSCRIBE]  # answered after an unrelated command and a stray answer
        await _send(stream, "SEND_RECEIPT", producer_id=0, sequence_id=7)
        await _send(stream, "SUCCESS", request_id=999)
        await _send(stream, "SUCCESS", request_id=first.unsubscribe.request_id)
        await reader.next()  # the second request: never answered, the connection drops

    lost: list[BrokerConnectionError] = []
    hooked: list[BaseCommand] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            port = await _serve(nursery, script)
            conn = await connect_broker("127.0.0.1", port, nursery, client_version="test")
            conn.on_command = hooked.append
            conn.on_lost = lost.append
            rid = conn.next_id()
            answer = await conn.request(make_command("UNSUBSCRIBE", consumer_id=1, request_id=rid), rid)
            assert (answer.type, answer.success.request_id) == (BaseCommand.SUCCESS, rid)
            rid = conn.next_id()
            with pytest.raises(BrokerConnectionError, match="closed the connection"):
                await conn.request(make_command("UNSUBSCRIBE", consumer_id=1, request_id=rid), rid)
            with pytest.raises(BrokerConnectionError):
                await conn.write(b"late")
            await conn.close()
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert pongs == [BaseCommand.PONG]
    assert [c.type for c in hooked] == [BaseCommand.SEND_RECEIPT, BaseCommand.SUCCESS]
    assert len(lost) == 1


def test_broker_urls() -> None:
    assert parse_broker_urls("pulsar://a:1,b") == [("a", 1), ("b", 6650)]
    assert parse_broker_urls("pulsar+ssl://h/") == [("h", 6651)]
    with pytest.raises(ValueError, match="pulsar://"):
        parse_broker_urls("http://a:1")
