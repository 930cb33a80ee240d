"""Authorization with the official client and the admin REST: super user, tenant admin, permissions."""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator

import httpx
import pulsar
import pytest
from click.testing import CliRunner

from broker import BrokerConfig
from broker.admin import Access, required_access
from broker.auth import create_token, new_secret_key
from magnetar.cli import main
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.broker_admin.admin_harness import AdminBroker
from tests.support.raw_pulsar import RawPeer

SECRET = new_secret_key()
TOKENS = {role: create_token(role, secret_key=SECRET) for role in ("root", "acme-admin", "writer", "reader", "nobody")}


@pytest.fixture(scope="module")
def b() -> Iterator[AdminBroker]:
    config = BrokerConfig(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=0,
        web_service_port=0,
        authentication_enabled=True,
        authentication_providers=("token",),
        authorization_enabled=True,
        super_user_roles=("root",),
        token_secret_key="data:;base64," + base64.b64encode(SECRET).decode(),
    )
    with AdminBroker(config) as broker:
        root = _http(broker, "root")
        assert (
            root.put(
                "/admin/v2/tenants/acme", json={"adminRoles": ["acme-admin"], "allowedClusters": ["standalone"]}
            ).status_code
            == 204
        )
        assert root.put("/admin/v2/namespaces/acme/ns").status_code == 204
        yield broker


def _http(b: AdminBroker, role: str) -> httpx.Client:
    return httpx.Client(base_url=b.http, headers={"Authorization": f"Bearer {TOKENS[role]}"}, timeout=10)


def _client(b: AdminBroker, role: str) -> pulsar.Client:
    return pulsar.Client(
        b.url,
        authentication=pulsar.AuthenticationToken(TOKENS[role]),
        operation_timeout_seconds=5,
        logger=logging.getLogger("pulsar-client"),
    )


def test_required_access_table() -> None:
    assert required_access("GET", "/admin/v2/clusters") == Access("any")
    assert required_access("PUT", "/admin/v2/tenants/acme") == Access("super")
    assert required_access("GET", "/admin/v2/tenants") == Access("super")
    assert required_access("GET", "/admin/v2/tenants/acme") == Access("tenant", "acme")
    assert required_access("POST", "/admin/v2/namespaces/acme/ns/permissions/r") == Access("tenant", "acme")
    assert required_access("GET", "/admin/v2/persistent/acme/ns/t%2Fx/stats") == Access("tenant", "acme")
    assert required_access("GET", "/lookup/v2/topic/persistent/acme/ns/t") == Access(
        "topic", "acme", "persistent://acme/ns/t"
    )
    assert required_access("GET", "/admin/v2/schemas/acme/ns/t/schema") == Access(
        "topic", "acme", "persistent://acme/ns/t"
    )
    assert required_access("GET", "/admin/v2/brokers") == Access("super")
    assert required_access("GET", "/admin/v2/persistent/acme/ns/t/partitions") == Access(
        "topic", "acme", "persistent://acme/ns/t"
    )
    assert required_access("GET", "/admin/v2/non-persistent/acme/ns/t/partitions") == Access(
        "topic", "acme", "non-persistent://acme/ns/t"
    )
    assert required_access("PUT", "/admin/v2/persistent/acme/ns/t/partitions") == Access("tenant", "acme")


def test_super_user_tenant_admin_and_nobody_on_the_rest(b: AdminBroker) -> None:
    root, admin, nobody = _http(b, "root"), _http(b, "acme-admin"), _http(b, "nobody")
    assert root.get("/admin/v2/tenants").status_code == 200
    assert admin.get("/admin/v2/tenants").status_code == 403
    assert admin.get("/admin/v2/tenants/acme").status_code == 200
    r = admin.put("/admin/v2/tenants/other", json={"adminRoles": []})
    assert r.status_code == 403 and "not authorized" in r.json()["reason"]
    assert admin.put("/admin/v2/namespaces/acme/ns2").status_code == 204
    assert admin.get("/admin/v2/namespaces/acme").json() == ["acme/ns", "acme/ns2"]
    assert admin.get("/admin/v2/namespaces/public/default").status_code == 403  # not its tenant
    assert nobody.get("/admin/v2/namespaces/acme").status_code == 403
    assert nobody.put("/admin/v2/namespaces/acme/ns3").status_code == 403
    assert nobody.get("/admin/v2/clusters").status_code == 200
    assert root.delete("/admin/v2/namespaces/acme/ns2").status_code == 204


def test_permission_endpoints(b: AdminBroker) -> None:
    admin = _http(b, "acme-admin")
    base = "/admin/v2/namespaces/acme/ns/permissions"
    assert admin.post(f"{base}/writer", json=["produce"]).status_code == 204
    assert admin.get(base).json()["writer"] == ["produce"]
    tp = "/admin/v2/persistent/acme/ns/shared/permissions"
    assert admin.post(f"{tp}/reader", json=["consume"]).status_code == 204
    perms = admin.get(tp).json()
    assert perms["reader"] == ["consume"] and perms["writer"] == ["produce"]
    assert admin.post(f"{base}/x", json=["fly"]).status_code == 400
    assert admin.post(f"{base}/x", json={"produce": True}).status_code == 400
    assert admin.post("/admin/v2/namespaces/acme/missing/permissions/x", json=["produce"]).status_code == 404
    assert admin.post(f"{base}/temp", json=["consume"]).status_code == 204
    assert admin.delete(f"{base}/temp").status_code == 204
    assert "temp" not in admin.get(base).json()
    assert _http(b, "writer").post(f"{base}/writer", json=["consume"]).status_code == 403


def test_produce_without_consume_on_the_protocol(b: AdminBroker) -> None:
    assert (
        _http(b, "acme-admin").post("/admin/v2/namespaces/acme/ns/permissions/writer", json=["produce"]).status_code
        == 204
    )
    topic = "persistent://acme/ns/only-produce"
    c = _client(b, "writer")
    try:
        producer = c.create_producer(topic)
        producer.send(b"one")
        with pytest.raises(pulsar.AuthorizationError):
            c.subscribe(topic, "sub")
        producer.send(b"two")  # the connection stays usable for what the role may do
    finally:
        c.close()
    c = _client(b, "nobody")
    try:
        with pytest.raises(pulsar.PulsarException):
            c.create_producer(topic)
    finally:
        c.close()
    c = _client(b, "root")
    try:
        consumer = c.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        assert consumer.receive(5000).data() == b"one"
    finally:
        c.close()


def test_topic_grant_and_revoke_take_effect(b: AdminBroker) -> None:
    admin = _http(b, "acme-admin")
    topic = "persistent://acme/ns/granted"
    c = _client(b, "reader")
    try:
        with pytest.raises(pulsar.PulsarException):
            c.subscribe(topic, "s")
        assert (
            admin.post("/admin/v2/persistent/acme/ns/granted/permissions/reader", json=["consume"]).status_code == 204
        )
        c.subscribe(topic, "s").close()
        assert admin.delete("/admin/v2/persistent/acme/ns/granted/permissions/reader").status_code == 204
        with pytest.raises(pulsar.PulsarException):
            c.subscribe(topic, "s2")
    finally:
        c.close()
    c = _client(b, "acme-admin")  # a tenant admin produces and consumes on its tenant
    try:
        c.subscribe(topic, "admin-sub").close()
        c.create_producer(topic).close()
    finally:
        c.close()


def test_admin_cli_permissions(b: AdminBroker) -> None:
    runner = CliRunner()
    base = ["admin", "--admin-url", b.http, "--token", TOKENS["acme-admin"]]
    r = runner.invoke(
        main, [*base, "namespaces", "grant-permission", "acme/ns", "--role", "cli-role", "--actions", "produce,consume"]
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, [*base, "--json", "namespaces", "permissions", "acme/ns"])
    assert r.exit_code == 0 and '"cli-role"' in r.output
    r = runner.invoke(
        main,
        [*base, "topics", "grant-permission", "persistent://acme/ns/t1", "--role", "t-role", "--actions", "consume"],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, [*base, "--json", "topics", "permissions", "persistent://acme/ns/t1"])
    assert r.exit_code == 0 and '"t-role"' in r.output and '"cli-role"' in r.output
    assert (
        runner.invoke(
            main, [*base, "topics", "revoke-permission", "persistent://acme/ns/t1", "--role", "t-role"]
        ).exit_code
        == 0
    )
    assert (
        runner.invoke(main, [*base, "namespaces", "revoke-permission", "acme/ns", "--role", "cli-role"]).exit_code == 0
    )
    r = runner.invoke(
        main,
        [
            "admin",
            "--admin-url",
            b.http,
            "--token",
            TOKENS["nobody"],
            "namespaces",
            "grant-permission",
            "acme/ns",
            "--role",
            "x",
            "--actions",
            "produce",
        ],
    )
    assert r.exit_code == 1 and "403" in r.output


def test_http_lookup_and_topic_listing_need_permissions(b: AdminBroker) -> None:
    assert (
        _http(b, "acme-admin").post("/admin/v2/namespaces/acme/ns/permissions/writer", json=["produce"]).status_code
        == 204
    )
    path = "/lookup/v2/topic/persistent/acme/ns/looked-up"
    assert _http(b, "writer").get(path).status_code == 200
    assert _http(b, "nobody").get(path).status_code == 403
    for role, allowed in (("writer", False), ("acme-admin", True)):
        peer = RawPeer(b.port)
        try:
            peer.send(
                "CONNECT",
                client_version="raw",
                protocol_version=20,
                auth_method_name="token",
                auth_data=TOKENS[role].encode(),
            )
            assert peer.recv().type == pb.BaseCommand.CONNECTED  # type: ignore[union-attr]
            peer.send("GET_TOPICS_OF_NAMESPACE", request_id=7, namespace="acme/ns")
            answer = peer.recv()
            assert answer is not None
            if allowed:
                assert answer.type == pb.BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE, answer
            else:
                assert answer.type == pb.BaseCommand.ERROR and answer.error.error == pb.AuthorizationError
                assert answer.error.request_id == 7
            peer.assert_alive()
        finally:
            peer.close()


def test_partitioned_metadata_is_a_lookup(b: AdminBroker) -> None:
    # clients with an http:// service URL (the Go and Java clients) read a topic's partitions
    # before they produce or consume: Pulsar checks it as a lookup (produce or consume permission)
    assert (
        _http(b, "acme-admin").post("/admin/v2/namespaces/acme/ns/permissions/reader", json=["consume"]).status_code
        == 204
    )
    assert _http(b, "acme-admin").put("/admin/v2/persistent/acme/ns/parted/partitions", json=2).status_code == 204
    for path, partitions in (
        ("/admin/v2/persistent/acme/ns/parted/partitions", 2),
        ("/admin/v2/persistent/acme/ns/plain/partitions", 0),
    ):
        for role in ("reader", "acme-admin"):
            r = _http(b, role).get(path)
            assert r.status_code == 200 and r.json()["partitions"] == partitions, (role, r.text)
        assert _http(b, "nobody").get(path).status_code == 403
    # changing it is still the tenant admin's
    assert _http(b, "reader").post("/admin/v2/persistent/acme/ns/parted/partitions", json=3).status_code == 403
    assert _http(b, "reader").put("/admin/v2/persistent/acme/ns/other/partitions", json=3).status_code == 403


def test_initial_subscription_of_a_producer_needs_consume(b: AdminBroker) -> None:
    assert (
        _http(b, "acme-admin").post("/admin/v2/namespaces/acme/ns/permissions/writer", json=["produce"]).status_code
        == 204
    )
    peer = RawPeer(b.port)
    try:
        peer.send(
            "CONNECT",
            client_version="raw",
            protocol_version=20,
            auth_method_name="token",
            auth_data=TOKENS["writer"].encode(),
        )
        assert peer.recv().type == pb.BaseCommand.CONNECTED  # type: ignore[union-attr]
        peer.send(
            "PRODUCER", topic="persistent://acme/ns/dlq", producer_id=1, request_id=1, initial_subscription_name="init"
        )
        answer = peer.recv()
        assert answer is not None and answer.type == pb.BaseCommand.ERROR, answer
        assert answer.error.error == pb.AuthorizationError and answer.error.request_id == 1
        peer.send("PRODUCER", topic="persistent://acme/ns/dlq", producer_id=2, request_id=2)
        answer = peer.recv()
        assert answer is not None and answer.type == pb.BaseCommand.PRODUCER_SUCCESS, answer
    finally:
        peer.close()


def test_probes_are_open_and_the_health_check_needs_a_super_user(b: AdminBroker) -> None:
    assert required_access("GET", "/admin/v2/brokers/health") == Access("super")
    with httpx.Client(base_url=b.http, timeout=10) as anonymous:
        assert anonymous.get("/admin/v2/brokers/ready").text == "ok"
        assert anonymous.get("/status.html").text == "OK"
        assert anonymous.get("/admin/v2/brokers/health").status_code == 401
    r = _http(b, "acme-admin").get("/admin/v2/brokers/health")
    assert r.status_code == 403 and "not authorized" in r.json()["reason"]
    assert _http(b, "nobody").get("/admin/v2/brokers/health").status_code == 403
    r = _http(b, "root").get("/admin/v2/brokers/health")
    assert r.status_code == 200 and r.text == "ok"


def test_message_reads_need_consume_and_expiry_needs_tenant_admin(b: AdminBroker) -> None:
    base = "/admin/v2/persistent/acme/ns/peeked"
    assert required_access("GET", f"{base}/lastMessageId") == Access("consume", "acme", "persistent://acme/ns/peeked")
    assert required_access("GET", f"{base}/subscription/s/position/1").kind == "consume"
    assert required_access("GET", f"{base}/ledger/1/entry/2").kind == "consume"
    assert required_access("GET", f"{base}/examinemessage").kind == "consume"
    assert required_access("POST", f"{base}/subscription/s/expireMessages/1") == Access("tenant", "acme")
    admin = _http(b, "acme-admin")
    assert admin.post("/admin/v2/persistent/acme/ns/peeked/permissions/peeker", json=["consume"]).status_code == 204
    assert admin.post("/admin/v2/persistent/acme/ns/peeked/permissions/pusher", json=["produce"]).status_code == 204
    c = _client(b, "root")
    try:
        c.create_producer("persistent://acme/ns/peeked").send(b"x")
    finally:
        c.close()
    TOKENS.setdefault("peeker", create_token("peeker", secret_key=SECRET))
    TOKENS.setdefault("pusher", create_token("pusher", secret_key=SECRET))
    assert _http(b, "peeker").get(f"{base}/examinemessage").content == b"x"
    assert _http(b, "peeker").get(f"{base}/lastMessageId").status_code == 200
    r = _http(b, "pusher").get(f"{base}/examinemessage")
    assert r.status_code == 403 and "consume permission" in r.json()["reason"]
    assert _http(b, "nobody").get(f"{base}/lastMessageId").status_code == 403
    assert _http(b, "peeker").post(f"{base}/subscription/s/expireMessages/1").status_code == 403
    assert required_access("DELETE", f"{base}/truncate") == Access("tenant", "acme")
    assert _http(b, "peeker").delete(f"{base}/truncate").status_code == 403
    assert _http(b, "acme-admin").delete(f"{base}/truncate").status_code == 204
    assert required_access("POST", f"{base}/terminate") == Access("tenant", "acme")
    assert _http(b, "peeker").post(f"{base}/terminate").status_code == 403


def test_subscription_permissions(b: AdminBroker) -> None:
    admin = _http(b, "acme-admin")
    assert _http(b, "root").put("/admin/v2/namespaces/acme/subs").status_code == 204
    base = "/admin/v2/namespaces/acme/subs/permissions"
    for role in ("writer", "reader"):
        assert admin.post(f"{base}/{role}", json=["consume"]).status_code == 204
    assert admin.get(f"{base}/subscription").json() == {}
    assert admin.post(f"{base}/subscription/orders", json=["reader"]).status_code == 204
    assert admin.get(f"{base}/subscription").json() == {"orders": ["reader"]}
    assert admin.post(f"{base}/subscription/orders", json="reader").status_code == 400
    assert admin.post("/admin/v2/namespaces/acme/missing/permissions/subscription/s", json=["x"]).status_code == 404
    assert _http(b, "writer").post(f"{base}/subscription/orders", json=["writer"]).status_code == 403
    topic = "persistent://acme/subs/t"
    c = _client(b, "writer")
    try:  # consume on the namespace, but not one of the subscription's roles
        with pytest.raises(pulsar.AuthorizationError):
            c.subscribe(topic, "orders")
        c.subscribe(topic, "other").close()  # an unlisted subscription stays open; connection usable
    finally:
        c.close()
    c = _client(b, "reader")
    try:
        c.subscribe(topic, "orders").close()
    finally:
        c.close()
    c = _client(b, "acme-admin")  # the tenant's admin is not limited by subscription roles
    try:
        c.subscribe(topic, "orders").close()
    finally:
        c.close()
    assert admin.delete(f"{base}/orders/reader").status_code == 204
    assert admin.get(f"{base}/subscription").json() == {}
    c = _client(b, "writer")
    try:  # no role left: the subscription is open again
        c.subscribe(topic, "orders").close()
    finally:
        c.close()


def test_admin_cli_subscription_permissions(b: AdminBroker) -> None:
    runner = CliRunner()
    base = ["admin", "--admin-url", b.http, "--token", TOKENS["acme-admin"]]
    r = runner.invoke(
        main,
        [
            *base,
            "namespaces",
            "grant-subscription-permission",
            "acme/ns",
            "--subscription",
            "cli-sub",
            "--roles",
            "r1,r2",
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, [*base, "--json", "namespaces", "subscription-permission", "acme/ns"])
    assert r.exit_code == 0 and '"cli-sub"' in r.output and '"r2"' in r.output, r.output
    for role in ("r1", "r2"):
        r = runner.invoke(
            main,
            [
                *base,
                "namespaces",
                "revoke-subscription-permission",
                "acme/ns",
                "--subscription",
                "cli-sub",
                "--role",
                role,
            ],
        )
        assert r.exit_code == 0, r.output
    r = runner.invoke(main, [*base, "--json", "namespaces", "subscription-permission", "acme/ns"])
    assert r.exit_code == 0 and "cli-sub" not in r.output
