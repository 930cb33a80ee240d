"""The admin API cannot be exhausted by bad input (issue 12, defect 5): bounded bodies, bounded
partition counts, fan-outs that stop with their client and never load partitions to report them,
and clean 4xx answers for bad JSON, bad names and bad path parameters.

Bodies and disconnects are driven over raw sockets (httpx always sends a whole body and never
leaves in the middle of a request); waits for the broker to reach a state poll with a deadline and
assert nothing about time.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import httpx
import pytest
import trio

from broker import BrokerConfig
from broker.admin._common import FANOUT_CONCURRENCY
from tests.broker_admin.admin_harness import AdminBroker
from tests.support.admin import V2, new_tenant_ns
from tests.support.waiting import wait_until

BODY_LIMIT = 64 * 1024
MAX_PARTITIONS = 64
HANG_GUARD_S = 20.0  # only a broken server gets near it: a response that never comes


@pytest.fixture(scope="module")
def broker() -> Iterator[AdminBroker]:
    """A broker with small limits; retention off, so that nothing but the requests under test opens
    managed ledgers."""
    with AdminBroker(
        _config(http_max_request_size=BODY_LIMIT, max_num_partitions_per_partitioned_topic=MAX_PARTITIONS)
    ) as b:
        yield b


def _config(**values: object) -> BrokerConfig:
    return BrokerConfig(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=0,
        web_service_port=0,
        retention_enabled=False,
        **values,
    )  # type: ignore[arg-type]


def _serves(http: httpx.Client) -> None:
    """The server still answers an ordinary request."""
    r = http.get(f"{V2}/clusters")
    assert r.status_code == 200 and r.json() == ["standalone"]


# ---------------------------------------------------------------------------------- raw HTTP


@dataclass
class RawAnswer:
    status: int
    headers: dict[str, str]
    body: bytes
    closed_by_server: bool
    sent: int = 0
    send_error: str | None = None

    def json(self) -> dict:
        return json.loads(self.body)


def _raw_request(port: int, head: str, chunks: Iterable[bytes] = ()) -> RawAnswer:
    """Send ``head`` (request line and headers, without the blank line) and then ``chunks`` from
    another thread, while reading the answer until the server closes the connection. A send
    that fails (the server closed first) ends the sending; a read that hangs fails the test."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(HANG_GUARD_S)
    sock.sendall(head.encode() + b"\r\n\r\n")
    answer = RawAnswer(0, {}, b"", False)

    def send_all() -> None:
        try:
            for chunk in chunks:
                sock.sendall(chunk)
                answer.sent += len(chunk)
        except OSError as exc:
            answer.send_error = type(exc).__name__

    sender = threading.Thread(target=send_all, daemon=True)
    sender.start()
    data = b""
    try:
        while True:
            try:
                got = sock.recv(65536)
            except ConnectionResetError:  # closed with unread data: the kernel answers with a reset
                got = b""
            if not got:
                answer.closed_by_server = True
                break
            data += got
    except TimeoutError:
        pass  # the server kept the connection open: closed_by_server stays False
    finally:
        sock.close()
        sender.join(HANG_GUARD_S)
    head_part, _, body = data.partition(b"\r\n\r\n")
    lines = head_part.decode("latin-1").split("\r\n")
    answer.status = int(lines[0].split()[1]) if lines and lines[0] else 0
    answer.headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    answer.body = body[: int(answer.headers.get("content-length", len(body)))]
    return answer


def _chunked(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    """``total`` bytes of a JSON-looking body in HTTP/1.1 chunked framing (never terminated: the
    server must answer before the end)."""
    yield b'2\r\n["\r\n'
    piece = b"a" * size
    for _ in range(total // size):
        yield b"%x\r\n%s\r\n" % (len(piece), piece)


# ---------------------------------------------------------------------------------- 1. body size


def test_content_length_over_the_limit_is_refused_before_the_body_is_read(broker: AdminBroker, http) -> None:
    # only the headers are sent: an answer proves the server did not wait for the body
    answer = _raw_request(
        broker.http_port,
        f"PUT {V2}/tenants/huge HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {50 * 2**20}",
    )
    assert answer.status == 413
    assert "httpMaxRequestSize" in answer.json()["reason"]
    assert answer.headers.get("connection") == "close" and answer.closed_by_server
    assert http.get(f"{V2}/tenants/huge").status_code == 404
    _serves(http)


def test_streamed_body_over_the_limit_is_cut_off_without_reading_the_rest(broker: AdminBroker, http) -> None:
    total = 64 * 2**20
    answer = _raw_request(
        broker.http_port,
        f"PUT {V2}/tenants/streamed HTTP/1.1\r\nHost: x\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked",
        _chunked(total),
    )
    assert answer.status == 413
    assert "httpMaxRequestSize" in answer.json()["reason"]
    # the server closed the connection (it does not hang on the queued rest of the body) long
    # before the client could send all of it
    assert answer.closed_by_server
    assert answer.send_error is not None and answer.sent < total
    assert http.get(f"{V2}/tenants/streamed").status_code == 404
    _serves(http)


def test_body_under_the_limit_is_still_served_on_a_kept_alive_connection(broker: AdminBroker, http) -> None:
    roles = [f"role-{i}" for i in range(100)]
    r = http.put(f"{V2}/tenants/fits", json={"adminRoles": roles})
    assert r.status_code == 204 and "close" not in r.headers.get("connection", "")
    assert http.get(f"{V2}/tenants/fits").json()["adminRoles"] == roles


def test_what_would_be_stored_is_bounded() -> None:
    stored_limit = 16 * 1024
    with (
        AdminBroker(_config(admin_max_stored_value_bytes=stored_limit)) as b,
        httpx.Client(base_url=b.http, timeout=HANG_GUARD_S) as http,
    ):
        # a body under httpMaxRequestSize but over what the admin parses, cut off at the bound
        answer = _raw_request(
            b.http_port,
            f"PUT {V2}/tenants/t HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked",
            _chunked(4 * 2**20),
        )
        assert answer.status == 413 and "admin_max_stored_value_bytes" in answer.json()["reason"]
        assert answer.closed_by_server
        assert http.get(f"{V2}/tenants/t").status_code == 404
        # a body under both bounds whose stored JSON is over (each é is stored as \u00e9)
        ns = new_tenant_ns(http, "t")
        r = http.put(f"{V2}/namespaces/t/big", json={"note": "é" * (stored_limit // 3)})
        assert r.status_code == 413 and "once stored" in r.json()["reason"]
        assert http.get(f"{V2}/namespaces/t/big").status_code == 404
        r = http.put(f"{V2}/tenants/u", json={"adminRoles": ["é" * 100] * (stored_limit // 300)})
        assert r.status_code == 413 and http.get(f"{V2}/tenants/u").status_code == 404
        # schemas: every version is kept in one node (base64), so the versions together are bounded
        strategy = f"{V2}/namespaces/{ns}/schemaCompatibilityStrategy"
        assert http.put(strategy, json="ALWAYS_COMPATIBLE").status_code == 204
        schema = f"{V2}/schemas/{ns}/s/schema"
        for i in range(3):
            body = {"type": "STRING", "schema": f"{i}" + "p" * (stored_limit // 4)}
            assert http.post(schema, json=body).status_code == (202 if i < 2 else 413)
        assert len(http.get(f"{V2}/schemas/{ns}/s/schemas").json()["getSchemaResponses"]) == 2
        _serves(http)


# ---------------------------------------------------------------------------------- 2. partitions


def test_partition_count_is_bounded_as_in_pulsar(http, name: str) -> None:
    ns = new_tenant_ns(http, name)
    tp = f"{V2}/persistent/{ns}"
    r = http.put(f"{tp}/p/partitions", json=MAX_PARTITIONS + 1)
    assert r.status_code == 406
    assert r.json()["reason"] == f"Number of partitions should be less than or equal to {MAX_PARTITIONS}"
    assert http.get(f"{tp}/p/partitions").json() == {"partitions": 0}
    r = http.put(f"{tp}/p/partitions", json=2**31)  # not a Java int
    assert r.status_code == 400 and http.get(f"{tp}/partitioned").json() == []
    assert http.put(f"{tp}/p/partitions", json=2).status_code == 204
    r = http.post(f"{tp}/p/partitions", json=MAX_PARTITIONS + 1)
    assert r.status_code == 406 and http.get(f"{tp}/p/partitions").json() == {"partitions": 2}
    assert http.post(f"{tp}/p/partitions", json=MAX_PARTITIONS).status_code == 204
    # an auto-creation override may not ask for more either
    override = {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": MAX_PARTITIONS + 1}
    r = http.put(f"{V2}/namespaces/{name}/auto", json={"autoTopicCreationOverride": override})
    assert r.status_code == 406 and http.get(f"{V2}/namespaces/{name}/auto").status_code == 404
    r = http.put(f"{V2}/namespaces/{name}/auto", json={"autoTopicCreationOverride": {"topicType": "sideways"}})
    assert r.status_code == 412 and "autoTopicCreationOverride" in r.json()["reason"]
    override["defaultNumPartitions"] = 3
    assert http.put(f"{V2}/namespaces/{name}/auto", json={"autoTopicCreationOverride": override}).status_code == 204
    assert http.get(f"{V2}/namespaces/{name}/auto").json()["autoTopicCreationOverride"] == override


# ---------------------------------------------------------------------------------- 3. fan-outs


@dataclass
class OpenGate:
    """Wraps the factory's ``open`` for managed ledgers under ``prefix``: counts the opens and, while
    ``hold`` is set, keeps them waiting until released."""

    prefix: str
    hold: bool = False
    started: int = 0
    in_flight: int = 0
    most_in_flight: int = 0
    cancelled: int = 0
    release: trio.Event = field(default_factory=trio.Event)


def _install(broker: AdminBroker, gate: OpenGate) -> Callable[[], None]:
    """Put ``gate`` in front of the broker's managed-ledger factory; returns the undo."""
    factory = broker.service.factory
    real_open = factory.open

    async def gated_open(name: str):
        if not name.startswith(gate.prefix):
            return await real_open(name)
        gate.started += 1
        gate.in_flight += 1
        gate.most_in_flight = max(gate.most_in_flight, gate.in_flight)
        try:
            if gate.hold:
                await gate.release.wait()
        except trio.Cancelled:
            gate.cancelled += 1
            raise
        finally:
            gate.in_flight -= 1
        return await real_open(name)

    async def install() -> None:
        factory.open = gated_open

    async def undo() -> None:
        gate.release.set()
        del factory.open  # the class's method again

    broker.call(install)
    return lambda: broker.call(undo)


def _loaded(broker: AdminBroker, prefix: str) -> list[str]:
    async def names() -> list[str]:
        return [k for k, t in broker.service.topics.items() if k.startswith(prefix) and not t.closed]

    return broker.call(names)


def _stored_partitioned_topic(http: httpx.Client, broker: AdminBroker, ns: str, n: int) -> str:
    """A partitioned topic whose ``n`` partitions all have a managed ledger (and a subscription
    ``s``) and are unloaded; returns its admin path."""
    tp = f"{V2}/persistent/{ns}/p"
    assert http.put(f"{tp}/partitions", json=n).status_code == 204
    assert http.put(f"{tp}/subscription/s").status_code == 204  # loads and stores every partition
    assert http.put(f"{tp}/unload").status_code == 204
    assert _loaded(broker, f"persistent://{ns}/") == []
    return tp


def test_partitioned_stats_reports_loaded_partitions_and_loads_none(broker: AdminBroker, http, name: str) -> None:
    ns = new_tenant_ns(http, name)
    tp = _stored_partitioned_topic(http, broker, ns, 40)
    gate = OpenGate(prefix=f"{ns}/persistent/")
    undo = _install(broker, gate)
    try:
        stats = http.get(f"{tp}/partitioned-stats?perPartition=true").json()
        assert stats["metadata"] == {"partitions": 40, "deleted": False} and stats["partitions"] == {}
        assert gate.started == 0 and _loaded(broker, f"persistent://{ns}/") == []
        # a partition loaded by its own use is reported, with the totals over what is loaded
        assert http.get(f"{tp}-partition-3/stats").status_code == 200
        stats = http.get(f"{tp}/partitioned-stats?perPartition=true").json()
        assert list(stats["partitions"]) == [f"persistent://{ns}/p-partition-3"]
        assert stats["storageSize"] == stats["partitions"][f"persistent://{ns}/p-partition-3"]["storageSize"]
        assert gate.started == 1
    finally:
        undo()


def test_a_fan_out_read_stops_loading_partitions_when_its_client_leaves(broker: AdminBroker, http, name: str) -> None:
    n = 3 * FANOUT_CONCURRENCY
    ns = new_tenant_ns(http, name)
    tp = _stored_partitioned_topic(http, broker, ns, n)
    gate = OpenGate(prefix=f"{ns}/persistent/", hold=True)
    undo = _install(broker, gate)
    try:
        sock = socket.create_connection(("127.0.0.1", broker.http_port))
        sock.sendall(f"GET {tp}/subscriptions HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        wait_until(lambda: gate.in_flight == FANOUT_CONCURRENCY, "the first partitions to be loading", timeout_s=20.0)
        sock.close()  # the client leaves while its request waits for the partitions
        wait_until(lambda: gate.cancelled == FANOUT_CONCURRENCY, "the loads to be cancelled", timeout_s=20.0)
        broker.call(_set, gate.release)
        # cancelled loads start no others: only the first batch was ever asked for
        assert gate.started == FANOUT_CONCURRENCY and gate.most_in_flight == FANOUT_CONCURRENCY
        assert _loaded(broker, f"persistent://{ns}/") == []
        _serves(http)
        # the same request, with a client that waits, loads them all, never more at once than the bound
        assert http.get(f"{tp}/subscriptions").json() == ["s"]
        assert gate.started == FANOUT_CONCURRENCY + n and gate.most_in_flight == FANOUT_CONCURRENCY
    finally:
        undo()


async def _set(event: trio.Event) -> None:
    event.set()


# ---------------------------------------------------------------------------------- 4. JSON types


@pytest.mark.parametrize("body", [b"null", b"[]", b'"text"', b"12", b"NaN", b"[" * 5_000])
def test_bodies_of_the_wrong_json_type_are_refused_and_store_nothing(http, name: str, body: bytes) -> None:
    headers = {"content-type": "application/json"}
    ns = new_tenant_ns(http, name)
    tp = f"{V2}/persistent/{ns}"
    assert http.put(f"{tp}/t").status_code == 204
    cases = [
        ("PUT", f"{V2}/tenants/{name}x", lambda: http.get(f"{V2}/tenants/{name}x").status_code == 404),
        ("POST", f"{V2}/tenants/{name}", lambda: http.get(f"{V2}/tenants/{name}").json()["adminRoles"] == []),
        ("PUT", f"{V2}/namespaces/{name}/other", lambda: http.get(f"{V2}/namespaces/{name}/other").status_code == 404),
        ("PUT", f"{tp}/p/partitions", lambda: http.get(f"{tp}/p/partitions").json() == {"partitions": 0}),
        (
            "POST",
            f"{V2}/namespaces/{ns}/retention",
            lambda: http.get(f"{V2}/namespaces/{ns}/retention").status_code == 204,
        ),
        (
            "POST",
            f"{V2}/namespaces/{ns}/backlogQuota",
            lambda: http.get(f"{V2}/namespaces/{ns}/backlogQuotaMap").json() == {},
        ),
        ("POST", f"{tp}/t/messageTTL", lambda: http.get(f"{tp}/t/messageTTL").status_code == 204),
        ("PUT", f"{tp}/t/subscription/s", lambda: http.get(f"{tp}/t/subscriptions").json() == []),
        ("POST", f"{V2}/schemas/{ns}/t/schema", lambda: http.get(f"{V2}/schemas/{ns}/t/schema").status_code == 404),
    ]
    for method, path, nothing_stored in cases:
        if body == b"12" and path.endswith(("/partitions", "/messageTTL")):
            continue  # a number is the right type there
        r = http.request(method, path, content=body, headers=headers)
        assert r.status_code == 400, (method, path, r.text)
        assert r.json()["reason"], (method, path)
        assert nothing_stored(), (method, path)
    _serves(http)


def test_wrong_types_inside_bodies_are_refused(http, name: str) -> None:
    ns = new_tenant_ns(http, name)
    tp = f"{V2}/persistent/{ns}/t"
    assert http.put(tp).status_code == 204
    assert http.put(f"{V2}/tenants/{name}2", json={"adminRoles": [{"role": 1}]}).status_code == 400
    assert http.put(f"{V2}/tenants/{name}2", json={"allowedClusters": "standalone"}).status_code == 400
    for policies in (
        {"deduplicationEnabled": "yes"},
        {"schema_compatibility_strategy": 5},
        {"is_allow_auto_update_schema": "no"},
        {"replication_clusters": [1]},
        {"retention_policies": {"retentionTimeInMinutes": "ten", "retentionSizeInMB": 1}},
    ):
        r = http.put(f"{V2}/namespaces/{name}/bad", json=policies)
        assert r.status_code == 400, policies
    assert http.get(f"{V2}/namespaces/{name}/bad").status_code == 404
    for message_id in (
        {"ledgerId": 1.5, "entryId": 0},
        {"ledgerId": "1", "entryId": 0},
        {"ledgerId": True, "entryId": 0},
        {"ledgerId": 2**64, "entryId": 0},
        {"ledgerId": 1, "entryId": -(2**70)},
    ):
        r = http.put(f"{tp}/subscription/bad", json=message_id)
        assert r.status_code == 400 and "ledgerId" in r.json()["reason"], message_id
    assert http.get(f"{tp}/subscriptions").json() == []
    r = http.post(f"{V2}/schemas/{ns}/t/schema", json={"type": "STRING", "schema": "", "properties": {"a": [1]}})
    assert r.status_code == 400


# ---------------------------------------------------------------------------------- 5. names


@pytest.mark.parametrize("bad", ["%2e%2e", "%2E%2E", "%2e", "..", "."])
def test_dot_names_are_invalid_names_as_in_pulsar(broker: AdminBroker, http, name: str, bad: str) -> None:
    ns = new_tenant_ns(http, name)
    assert http.put(f"{V2}/persistent/{ns}/t").status_code == 204
    expectations = [
        ("PUT", f"{V2}/tenants/{bad}", "Tenant name is not valid"),
        ("GET", f"{V2}/tenants/{bad}", "Tenant name is not valid"),
        ("DELETE", f"{V2}/tenants/{bad}", "Tenant name is not valid"),
        ("GET", f"{V2}/namespaces/{bad}", "Tenant name is not valid"),
        ("PUT", f"{V2}/namespaces/{name}/{bad}", "Namespace name is not valid"),
        ("GET", f"{V2}/namespaces/{bad}/ns", "Namespace name is not valid"),
        ("GET", f"{V2}/persistent/{name}/{bad}", "Namespace name is not valid"),
        ("PUT", f"{V2}/persistent/{ns}/{bad}", "Topic name is not valid"),
        ("PUT", f"{V2}/persistent/{ns}/{bad}/partitions", "Topic name is not valid"),
        ("GET", f"{V2}/persistent/{ns}/{bad}/stats", "Topic name is not valid"),
        ("GET", f"/lookup/v2/topic/persistent/{ns}/{bad}", "Topic name is not valid"),
        ("PUT", f"{V2}/persistent/{ns}/t/subscription/{bad}", "Subscription name is not valid"),
        ("POST", f"{V2}/persistent/{ns}/t/subscription/{bad}/skip_all", "Subscription name is not valid"),
    ]
    for method, path, reason in expectations:
        # raw: an HTTP client would resolve a literal "." or ".." segment away
        r = _raw_request(broker.http_port, f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close")
        assert r.status == 412, (method, path, r.status, r.body)
        assert r.json()["reason"].startswith(reason), (method, path)
        assert r.closed_by_server, (method, path)  # as asked ("Connection: close"), reads included
    assert http.get(f"{V2}/persistent/{ns}").json() == [f"persistent://{ns}/t"]
    _serves(http)


@pytest.mark.parametrize("local", ["-partition-0", ".-partition-1", "..-partition-2", "a%00b"])
def test_topic_names_that_would_be_no_path_are_invalid(http, name: str, local: str) -> None:
    ns = new_tenant_ns(http, name)
    for method, suffix in (
        ("PUT", ""),
        ("GET", "/stats"),
        ("GET", "/internalStats"),
        ("PUT", "/unload"),
        ("GET", "/explain-storage"),
        ("GET", "/subscriptions"),
    ):
        r = http.request(method, f"{V2}/persistent/{ns}/{local}{suffix}")
        assert r.status_code == 412 and r.json()["reason"].startswith("Topic name is not valid"), (method, suffix)


# ---------------------------------------------------------------------------------- 6. path params


def test_path_parameters_out_of_range_are_400(http, name: str) -> None:
    ns = new_tenant_ns(http, name)
    sub = f"{V2}/persistent/{ns}/t/subscription/s"
    assert http.put(f"{V2}/persistent/{ns}/t").status_code == 204
    assert http.put(sub).status_code == 204
    for path in (
        f"{sub}/skip/-1",
        f"{sub}/skip/{2**31}",
        f"{sub}/skip/1e3",
        f"{sub}/resetcursor/{2**63}",
        f"{sub}/resetcursor/-{2**63 + 1}",
        f"{sub}/resetcursor/now",
    ):
        r = http.post(path)
        assert r.status_code == 400 and r.json()["reason"], path
    r = http.get(f"{V2}/schemas/{ns}/t/schema/{2**64}")
    assert r.status_code == 400
    assert http.post(f"{sub}/skip/{2**31 - 1}").status_code == 204
    assert http.post(f"{sub}/resetcursor/-1").status_code == 204
    _serves(http)
