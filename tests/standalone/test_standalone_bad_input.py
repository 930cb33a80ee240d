"""Bad input on every port of a running standalone, then the official client still works.

Random bytes, malformed and oversized frames on the Pulsar port and the bookie port, and garbage,
oversized and malformed requests on the admin REST and bookie REST ports. Each must be refused
on its own connection (or answered with a 4xx) and leave the server serving: after every case a
fresh producer and consumer round-trip a message, and the process is still running.
"""

from __future__ import annotations

import random
import re
import socket
import struct
import threading
import time
from collections.abc import Iterator

import httpx
import pulsar
import pytest

from protocols.pulsar import encode_command, make_command
from tests.support.standalone import Standalone, start_standalone

pytestmark = pytest.mark.slow

_BOOKIE = re.compile(r"bookie \S+: protocol (\S+):(\d+), http http://[^:]+:(\d+)")
_round = iter(range(10**9))


@pytest.fixture(scope="module")
def sa(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    proc = start_standalone(tmp_path_factory.mktemp("bad-input") / "data")
    try:
        yield proc
    finally:
        if proc.proc.poll() is None:
            assert proc.stop() == 0, proc.log()[-3000:]


def _ports(sa: Standalone) -> dict[str, tuple[str, int]]:
    match = _BOOKIE.search(sa.log())
    assert match, sa.log()[-2000:]
    pulsar_host, pulsar_port = sa.service_url.removeprefix("pulsar://").rsplit(":", 1)
    admin_host, admin_port = sa.admin_url.removeprefix("http://").rsplit(":", 1)
    return {
        "pulsar": (pulsar_host, int(pulsar_port)),
        "admin": (admin_host, int(admin_port)),
        "bookie": (match.group(1), int(match.group(2))),
        "bookie-http": ("127.0.0.1", int(match.group(3))),
    }


def _still_serving(sa: Standalone) -> None:
    """The server is alive and the official client round-trips a message on a new topic."""
    assert sa.proc.poll() is None, sa.log()[-3000:]
    topic = f"after-bad-input-{next(_round)}"
    client = pulsar.Client(
        sa.service_url, operation_timeout_seconds=20, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        done = threading.Event()
        producer.send_async(b"still here", lambda result, _id: done.set())
        assert done.wait(30), "the send got no receipt"
        assert consumer.receive(20_000).data() == b"still here"
    finally:
        client.close()


def _blast(addr: tuple[str, int], data: bytes, *, read: bool = True) -> bytes:
    """Send ``data`` on a new connection, half-close, and return what came back before the server
    closed (or 5 s passed)."""
    with socket.create_connection(addr, timeout=10) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            return b""  # the server closed while we wrote: refused, as it may
        got = b""
        if read:
            s.settimeout(5)
            try:
                while chunk := s.recv(65536):
                    got += chunk
            except (TimeoutError, OSError):
                pass
        return got


def _random_payloads(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    out = [rng.randbytes(n) for n in (1, 7, 64, 4096, 70_000)]
    out.append(struct.pack(">I", 0xFFFFFFF0) + rng.randbytes(100))  # a length no frame may have
    out.append(struct.pack(">II", 50, 200) + rng.randbytes(40))  # cmdSize past the frame
    return out


@pytest.mark.parametrize("port", ["pulsar", "bookie", "admin", "bookie-http"])
def test_random_bytes_on_every_port(sa: Standalone, port: str) -> None:
    addr = _ports(sa)[port]
    for payload in _random_payloads(hash(port) & 0xFFFF):
        _blast(addr, payload)
    _still_serving(sa)


def test_malformed_pulsar_frames_after_connect(sa: Standalone) -> None:
    addr = _ports(sa)["pulsar"]
    connect = encode_command(make_command("CONNECT", client_version="bad-input-test", protocol_version=20))
    cases = [
        connect + struct.pack(">II", 12, 8) + b"\x08\x06\x32\x04garb",  # a SEND whose body does not parse
        connect + encode_command(make_command("PRODUCER", topic="x", producer_id=1, request_id=1))[:-3],  # truncated
        connect + encode_command(make_command("SEND", producer_id=77, sequence_id=0)),  # no such producer, no payload
        connect + struct.pack(">I", 6 * 1024 * 1024) + b"\x00" * 1024,  # over maxMessageSize + padding
        connect + connect,  # a second CONNECT
    ]
    for data in cases:
        _blast(addr, data)
    _still_serving(sa)


def test_oversized_and_malformed_admin_requests(sa: Standalone) -> None:
    base = sa.admin_url
    with httpx.Client(timeout=30) as http:
        big = b"{" + b" " * (12 * 1024 * 1024) + b"}"
        r = http.put(f"{base}/admin/v2/tenants/huge", content=big, headers={"Content-Type": "application/json"})
        assert r.status_code == 413, r.text
        assert http.get(f"{base}/admin/v2/tenants/huge").status_code == 404  # nothing stored
        r = http.put(f"{base}/admin/v2/tenants/nulled", content=b"null", headers={"Content-Type": "application/json"})
        assert r.status_code == 400, r.text
        for bad in ("..", "%2e%2e"):
            r = http.put(f"{base}/admin/v2/persistent/public/default/{bad}")
            assert r.status_code in (404, 412), (bad, r.status_code, r.text)
            assert r.status_code != 500
        r = http.put(f"{base}/admin/v2/persistent/public/default/many/partitions", json=10**9)
        assert r.status_code in (400, 406), r.text
    # a request line that is not HTTP, and a declared body far larger than what follows
    addr = _ports(sa)["admin"]
    _blast(addr, b"\x16\x03\x01\x02\x00" + bytes(range(256)))
    _blast(addr, b"PUT /admin/v2/tenants/t HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n{}")
    _still_serving(sa)


def test_malformed_bookie_rest_requests(sa: Standalone) -> None:
    host, port = _ports(sa)["bookie-http"]
    base = f"http://{host}:{port}"
    with httpx.Client(timeout=30) as http:
        for method, path, body in [
            ("PUT", "/api/v1/bookie/gc", b"{not json"),
            ("PUT", "/api/v1/bookie/state/readonly", b"[1, 2"),
            ("GET", "/api/v1/bookie/no-such-endpoint", b""),
            ("PUT", "/api/v1/bookie/gc", b'{"forceMajor": "maybe"}'),
        ]:
            r = http.request(method, f"{base}{path}", content=body)
            assert 400 <= r.status_code < 500, (method, path, r.status_code, r.text)
        # the bookie stayed writable: nothing above turned it read-only
        assert http.get(f"{base}/api/v1/bookie/state").json().get("readOnly") in (False, None)
    _still_serving(sa)


def test_many_half_open_connections_before_connect(sa: Standalone) -> None:
    addr = _ports(sa)["pulsar"]
    socks = []
    try:
        for _ in range(50):
            s = socket.create_connection(addr, timeout=10)
            s.sendall(struct.pack(">I", 60 * 1024))  # announces a frame, never sends it
            socks.append(s)
        time.sleep(0.5)  # a bounded chance for the stalled connections to choke the broker
        _still_serving(sa)
    finally:
        for s in socks:
            s.close()
