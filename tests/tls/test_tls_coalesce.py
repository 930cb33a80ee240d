"""magnetar.common.tls.CoalescingSSLObject: one read returns every whole TLS record already received.

Without it a peer writing one record per message (the Pulsar C++ client writes one per SEND)
hands the broker one message per ``receive_some`` and breaks its per-burst batching.
"""

from __future__ import annotations

import ssl

import pytest
import trio
import trio.testing

from magnetar.common.tls import CoalescingSSLObject, TlsSettings, client_context, server_context
from tests.support.certs import Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _contexts(certs: Certs) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server = server_context(TlsSettings(cert_file=certs.server_cert, key_file=certs.server_key))
    client = client_context(TlsSettings(trust_certs_file=certs.ca))
    return server, client


class _Pair:
    """A client and a server `ssl.SSLObject` joined by memory BIOs, handshake done."""

    def __init__(self, certs: Certs) -> None:
        server_ctx, client_ctx = _contexts(certs)
        self.c_in, self.c_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.s_in, self.s_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.client = client_ctx.wrap_bio(self.c_in, self.c_out, server_hostname="localhost")
        self.server = server_ctx.wrap_bio(self.s_in, self.s_out, server_side=True)
        for _ in range(10):
            done = 0
            for obj in (self.client, self.server):
                try:
                    obj.do_handshake()
                    done += 1
                except ssl.SSLWantReadError:
                    pass
            self.s_in.write(self.c_out.read())
            self.c_in.write(self.s_out.read())
            if done == 2:
                break
        else:  # pragma: no cover - a handshake between two local contexts always completes
            raise AssertionError("handshake did not complete")

    def client_records(self, messages: list[bytes]) -> bytes:
        """The wire bytes of one TLS record per message, as a client writing them one by one."""
        for m in messages:
            self.client.write(m)
        return self.c_out.read()


def test_contexts_use_the_coalescing_object(certs: Certs) -> None:
    for ctx in _contexts(certs):
        assert ctx.sslobject_class is CoalescingSSLObject


def test_one_read_returns_every_whole_record_and_keeps_a_partial_one(certs: Certs) -> None:
    pair = _Pair(certs)
    messages = [bytes([i]) * 1000 for i in range(11)]
    wire = pair.client_records(messages)
    # everything but the last record's final bytes has arrived
    pair.s_in.write(wire[:-10])
    got = pair.server.read(65536)
    assert got == b"".join(messages[:10])
    with pytest.raises(ssl.SSLWantReadError):  # the partial record waits for its end
        pair.server.read(65536)
    pair.s_in.write(wire[-10:])
    assert pair.server.read(65536) == messages[10]


def test_read_never_returns_more_than_asked(certs: Certs) -> None:
    pair = _Pair(certs)
    messages = [bytes([i]) * 1000 for i in range(5)]
    pair.s_in.write(pair.client_records(messages))
    whole = b"".join(messages)
    got = b""
    while len(got) < len(whole):
        part = pair.server.read(2500)
        assert 0 < len(part) <= 2500
        got += part
    assert got == whole


def test_a_corrupt_record_after_good_ones_is_reported_by_the_next_read(certs: Certs) -> None:
    pair = _Pair(certs)
    good = pair.client_records([b"a" * 100, b"b" * 100])
    bad = bytearray(pair.client_records([b"c" * 100]))
    bad[-1] ^= 0xFF  # breaks the record's authentication tag
    pair.s_in.write(good + bytes(bad))
    assert pair.server.read(65536) == b"a" * 100 + b"b" * 100
    with pytest.raises(ssl.SSLError) as e:
        pair.server.read(65536)
    assert not isinstance(e.value, ssl.SSLWantReadError)


async def test_sslstream_receive_some_gets_a_burst_of_small_writes(certs: Certs) -> None:
    """Over trio's SSLStream: 50 small writes sent before the reader looks arrive in few reads."""
    server_ctx, client_ctx = _contexts(certs)
    client_raw, server_raw = trio.testing.memory_stream_pair()
    client = trio.SSLStream(client_raw, client_ctx, server_hostname="localhost")
    server = trio.SSLStream(server_raw, server_ctx, server_side=True)
    messages = [i.to_bytes(4, "big") * 256 for i in range(50)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.do_handshake)
        await client.do_handshake()
    for m in messages:  # each send_all is one TLS record
        await client.send_all(m)
    await client.aclose()
    reads = []
    while True:
        data = await server.receive_some(65536)
        if not data:
            break
        reads.append(data)
    assert b"".join(reads) == b"".join(messages)
    # memory_stream_pair hands over what was written in chunks; without coalescing there would
    # be one read per record (50)
    assert len(reads) < 10, [len(r) for r in reads]
