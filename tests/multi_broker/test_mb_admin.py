"""Cluster admin over REST with two real brokers: brokers, leader, bundles; a bundle unload and a
split under load move or keep topics with no failed send and nothing receipted lost; topic
operations on the wrong broker are redirected (307) to the owner."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pulsar
import pytest
from click.testing import CliRunner

from broker.resources._bundles import bundle_hash, parse_bundle
from magnetar.cli import main
from tests.support.admin import new_namespace, rest
from tests.support.clients import drain
from tests.support.receipts import ReceiptLog, produce_until
from tests.support.waiting import wait_until
from tests.support.zookeeper import ZooKeeperServer

from .mb_support import MultiBrokerCluster, owners

pytestmark = pytest.mark.slow


def _bundle_of(url: str, ns: str, topic: str) -> tuple[str, str]:
    h = bundle_hash(topic)
    return next((name, u) for name, u in owners(url, ns).items() if parse_bundle(name).contains(h))


def test_admin_unload_and_split_under_load(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    url = zookeeper.url(f"/mb-admin-{uuid.uuid4().hex[:8]}", session_timeout_ms=4000)
    cluster = MultiBrokerCluster(tmp_path, url, 2).start()
    try:
        a, b = cluster.brokers
        ids = rest("GET", a.admin_url, "/admin/v2/brokers").json()
        assert sorted(ids) == sorted(x.admin_url.split("://")[1] for x in (a, b))
        assert rest("GET", b.admin_url, "/admin/v2/brokers/standalone").json() == ids
        wait_until(
            lambda: httpx.get(f"{a.admin_url}/admin/v2/brokers/leaderBroker").status_code == 200,
            "a leader",
            timeout_s=30,
        )
        leader = rest("GET", b.admin_url, "/admin/v2/brokers/leaderBroker").json()
        assert leader["brokerId"] in ids
        # each broker serves its own heartbeat namespace, whoever owns what
        for x in (a, b):
            assert rest("GET", x.admin_url, "/admin/v2/brokers/health").text == "ok"
        report = rest("GET", a.admin_url, "/admin/v2/broker-stats/load-report").json()
        assert {"numBundles", "numTopics", "msgRateIn", "cpu", "memory", "bundleStats"} <= set(report)
        ns = new_namespace(a.admin_url, "adm")
        assert rest("GET", a.admin_url, f"/admin/v2/namespaces/{ns}/bundles").json()["numBundles"] == 4

        topic = f"persistent://{ns}/moved"
        client = pulsar.Client(a.service_url, operation_timeout_seconds=30)
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(
            topic, batching_enabled=False, block_if_queue_full=True, max_pending_messages=300, send_timeout_millis=60000
        )
        log = ReceiptLog()
        produce_until(producer, log, "one", 100)
        bundle, owner_url = _bundle_of(url, ns, topic)
        owner = a if owner_url == a.service_url else b
        other = b if owner is a else a

        # topic operations on the other broker are redirected to the owner
        r = httpx.get(f"{other.admin_url}/admin/v2/persistent/{ns}/moved/stats?x=1", timeout=30)
        assert r.status_code == 307 and r.headers["location"].startswith(owner.admin_url)
        assert r.headers["location"].endswith("/stats?x=1&authoritative=true")  # as Pulsar's redirects
        stats = httpx.get(f"{other.admin_url}/admin/v2/persistent/{ns}/moved/stats", timeout=30, follow_redirects=True)
        assert stats.status_code == 200 and stats.json()["publishers"]

        # HTTP lookups of topics in unowned bundles: a broker picked for a bundle takes it when the
        # redirect reaches it (authoritative), so no lookup bounces on to a third hop
        fresh = new_namespace(a.admin_url, "lkp")
        redirected = 0
        for name in (f"t{i}" for i in range(16)):  # 16 topics over the namespace's 4 unowned bundles
            r = httpx.get(f"{a.admin_url}/lookup/v2/topic/persistent/{fresh}/{name}", timeout=30, follow_redirects=True)
            assert r.status_code == 200 and len(r.history) <= 1, (r.status_code, [h.url for h in r.history])
            if r.history:  # redirected: the target took the bundle because the redirect said so
                assert r.json()["brokerUrl"] == b.service_url
                redirected += 1
            else:
                assert r.json()["brokerUrl"] == a.service_url
        if redirected:
            taken = [
                d
                for d in rest("GET", b.admin_url, "/admin/v2/broker-stats/load-decisions").json()
                if d["bundle"].startswith(f"{fresh}/")
            ]
            assert taken and all("authoritative lookup" in d["reason"] for d in taken), taken

        # unload through the broker that does not own it (307 to the owner); clients move
        r = httpx.put(f"{other.admin_url}/admin/v2/namespaces/{ns}/{bundle}/unload", timeout=60, follow_redirects=True)
        assert r.status_code == 204, r.text
        produce_until(producer, log, "two", log.count() + 100)
        decisions = rest("GET", owner.admin_url, "/admin/v2/broker-stats/load-decisions").json()
        assert any(
            d["action"] == "unloaded" and d["bundle"] == f"{ns}/{bundle}" and d["reason"] == "admin unload"
            for d in decisions
        )

        # split the topic's bundle (wherever it went) under load: 5 bundles, the topic keeps working
        bundle, owner_url = _bundle_of(url, ns, topic)
        owner = a if owner_url == a.service_url else b
        rest("PUT", owner.admin_url, f"/admin/v2/namespaces/{ns}/{bundle}/split")
        assert rest("GET", a.admin_url, f"/admin/v2/namespaces/{ns}/bundles").json()["numBundles"] == 5
        produce_until(producer, log, "three", log.count() + 100)
        half = parse_bundle(_bundle_of(url, ns, topic)[0])
        parent = parse_bundle(bundle)
        assert parent.lower <= half.lower < half.upper <= parent.upper and half != parent

        # the CLI: brokers, bundles, and a namespace unload through either broker (every bundle)
        def cli(*args: str) -> object:
            res = CliRunner().invoke(main, ["admin", "--admin-url", other.admin_url, *args, "--json"])
            assert res.exit_code == 0, res.output
            return json.loads(res.output)

        assert sorted(cli("brokers", "list")) == sorted(ids)  # type: ignore[arg-type]
        assert cli("namespaces", "bundles", ns)["numBundles"] == 5  # type: ignore[index]
        cli("namespaces", "unload", ns)
        produce_until(producer, log, "four", log.count() + 100)
        producer.flush()
        assert not log.failed, log.failed[:5]
        got = [m.data() for m in drain(consumer, wait_ms=3000)]
        missing = set(log.ok) - set(got)
        assert not missing, f"{len(missing)} receipted messages lost, e.g. {sorted(missing)[:5]}"
        client.close()
    finally:
        cluster.close()
