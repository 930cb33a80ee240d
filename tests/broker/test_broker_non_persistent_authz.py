"""Authorization applies to non-persistent topics as to persistent ones (official client, basic auth)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pulsar
import pytest

from tests.support.broker_thread import BrokerThread

from .basic_auth import basic_auth_config, basic_client, htpasswd_file


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    with BrokerThread(basic_auth_config(htpasswd_file(tmp_path_factory.mktemp("np-authz"))), admin=True) as b:
        yield b


def test_non_persistent_topics_need_the_same_permissions(broker: BrokerThread) -> None:
    admin = httpx.Client(base_url=broker.http, auth=("superuser", "admin"), timeout=10)
    assert (
        admin.post("/admin/v2/namespaces/public/default/permissions/app", json=["produce", "consume"]).status_code
        == 204
    )
    topic = "non-persistent://public/default/np-authz"
    c = basic_client(broker, "app", "app-secret")
    try:
        consumer = c.subscribe(topic, "s")
        c.create_producer(topic).send(b"allowed")
        assert consumer.receive(10_000).data() == b"allowed"
    finally:
        c.close()
    c = basic_client(broker, "shauser", "sha-secret")
    try:  # authenticated, without permission on the namespace
        with pytest.raises(pulsar.AuthorizationError):
            c.create_producer(topic)
        with pytest.raises(pulsar.AuthorizationError):
            c.subscribe(topic, "s")
    finally:
        c.close()
    stats = "/admin/v2/non-persistent/public/default/np-authz/stats"
    assert httpx.get(broker.http + stats, auth=("shauser", "sha-secret"), timeout=10).status_code in (401, 403)
    assert httpx.get(broker.http + stats, timeout=10).status_code == 401
    assert admin.get("/admin/v2/non-persistent/public/default").status_code == 200
