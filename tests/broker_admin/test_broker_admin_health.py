"""Broker health (heartbeat round trip), readiness and /status.html, against the in-process broker."""

from __future__ import annotations

import httpx
import trio

from broker import BrokerConfig, BrokerService
from broker.admin import create_admin_app
from broker.admin._brokers import heartbeat_topic
from protocols.pulsar import TopicName
from tests.broker_admin.admin_harness import AdminBroker


def test_health_writes_and_reads_the_heartbeat_topic(broker: AdminBroker, http: httpx.Client) -> None:
    r = http.get("/admin/v2/brokers/health")
    assert r.status_code == 200 and r.text == "ok"
    assert http.get("/admin/v2/brokers/health", params={"topicVersion": "V2"}).text == "ok"
    broker_id = broker.service.web_service_url.split("://", 1)[1]
    topic = heartbeat_topic(broker_id)
    assert str(topic) == f"persistent://pulsar/{broker_id}/healthcheck"
    # two heartbeats were stored on the heartbeat topic; its namespace trims them (retention 0/0)
    stats = http.get(f"/admin/v2/persistent/pulsar/{broker_id}/healthcheck/internalStats").json()
    assert stats["numberOfEntries"] >= 2
    retention = http.get(f"/admin/v2/namespaces/pulsar/{broker_id}/retention").json()
    assert retention == {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
    assert http.get("/admin/v2/brokers/health", params={"topicVersion": "V1"}).status_code == 412
    assert http.get("/admin/v2/brokers/health", params={"topicVersion": "V3"}).status_code == 400


def test_ready_and_status_html_on_a_serving_broker(http: httpx.Client) -> None:
    r = http.get("/admin/v2/brokers/ready")
    assert r.status_code == 200 and r.text == "ok"
    r = http.get("/status.html")
    assert r.status_code == 200 and r.text == "OK"


async def test_not_ready_until_the_service_runs_and_listens() -> None:
    from metadata import open_metadata_store

    async with open_metadata_store("memory://not-ready") as store:
        service = BrokerService(factory=_NoLedgers(), store=store, config=BrokerConfig())  # type: ignore[arg-type]
        app = create_admin_app(service)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://broker") as http:
            r = await http.get("/admin/v2/brokers/ready")
            assert r.status_code == 503 and r.json()["reason"] == "Broker is not ready"
            assert (await http.get("/status.html")).status_code == 404
            assert (await http.get("/admin/v2/brokers/health")).status_code == 503
            async with trio.open_nursery() as nursery:
                await nursery.start(service.run)
                assert (await http.get("/admin/v2/brokers/ready")).status_code == 503  # no port yet
                service.set_port(6650)
                assert (await http.get("/admin/v2/brokers/ready")).status_code == 200
                assert (await http.get("/status.html")).text == "OK"
                nursery.cancel_scope.cancel()
            assert (await http.get("/admin/v2/brokers/ready")).status_code == 503  # stopped


class _NoLedgers:
    """Just enough of a managed-ledger factory for a service that opens no topic."""

    metrics = None

    def get(self, name: str) -> None:
        return None

    async def list(self, prefix: str = "") -> list[str]:
        return []


def test_heartbeat_topic_name() -> None:
    assert heartbeat_topic("10.0.0.1:8080") == TopicName.parse("persistent://pulsar/10.0.0.1:8080/healthcheck")


def test_cli_brokers_healthcheck(broker: AdminBroker) -> None:
    from click.testing import CliRunner

    from magnetar.cli import main

    result = CliRunner().invoke(main, ["admin", "--admin-url", broker.http, "brokers", "healthcheck"])
    assert result.exit_code == 0 and result.output.strip() == "ok"
    result = CliRunner().invoke(main, ["admin", "--admin-url", broker.http, "brokers", "healthcheck", "-tv", "V1"])
    assert result.exit_code == 1 and "HTTP 412" in result.output
