"""A secured two-broker cluster (token authentication, authorization, TLS ports) with real
processes and the official client: a client of broker A uses a topic owned by broker B, over
plain text and over TLS (redirected to B's TLS URL); namespace unload and bundle split asked of
the broker that does not own the bundle reach the owner with the broker's own credentials
(``brokerClient*`` keys); an unauthenticated broker-to-broker unload is refused (401), an
authenticated one is done; nothing receipted is lost meanwhile. The load-manager leader's split
of the other broker's bundle is accepted (the brokers' client certificate over https), and
``magnetar cluster start`` runs such a cluster with per-broker TLS ports."""

from __future__ import annotations

import json
import logging
import re
import ssl
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import pulsar
import pytest
import trio
from click.testing import CliRunner
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from broker import BrokerConfig
from broker.auth import create_token
from broker.cluster._broker_client import BrokerClient
from broker.resources._bundles import bundle_hash, parse_bundle
from magnetar.cli import main
from tests.support.brokers import BrokerProcess
from tests.support.certs import Certs, make_certs
from tests.support.clients import drain
from tests.support.ports import free_port
from tests.support.receipts import ReceiptLog, produce_until
from tests.support.waiting import wait_until
from tests.support.zookeeper import ZooKeeperServer, zookeeper_available

from .mb_support import MultiBrokerCluster, owners, run_magnetar

pytestmark = pytest.mark.slow

SECRET = b"multi-broker-test-secret-0123456789"
ZK_CREDENTIAL = "magnetar:launcher-zk-s3cret"
_TLS_LINE = re.compile(r"TLS: (pulsar\+ssl://\S+)\s+admin REST TLS: (https://\S+)")


class _Lines(logging.Handler):
    """Collects the records a logger gets (the official client's log lines)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _tls_urls(broker: BrokerProcess) -> tuple[str, str]:
    match = _TLS_LINE.search(broker.log())
    assert match, broker.log()[-2000:]
    return match.group(1), match.group(2)


@dataclass(frozen=True)
class _Secured:
    certs: Certs
    admin_token: str
    app_token: str
    broker_token: Path
    keys: dict[str, str]

    @property
    def args(self) -> list[str]:
        """The keys as ``--set broker.key=value`` arguments of ``magnetar broker``."""
        return [x for k, v in self.keys.items() for x in ("--set", f"broker.{k}={v}")]


def _secured(tmp_path: Path, *, client_cert: bool = False, **more: str) -> _Secured:
    """Keys of a secured cluster: tokens (roles admin, app, and the brokers' own "broker"), TLS
    ports next to the plain ones, and the brokers' client credentials: their token, or with
    ``client_cert`` a client certificate whose CN is "broker" (Pulsar's AuthenticationTls)."""
    certs = make_certs(tmp_path / "certs", clients=("broker",))
    (tmp_path / "secret.key").write_bytes(SECRET)
    broker_token = tmp_path / "broker.token"
    broker_token.write_text(create_token(subject="broker", secret_key=SECRET))
    keys = {
        "authenticationEnabled": "true",
        "authenticationProviders": "token",
        "tokenSecretKey": f"file://{tmp_path / 'secret.key'}",
        "authorizationEnabled": "true",
        "superUserRoles": "admin,broker",
        "brokerServicePortTls": "0",
        "webServicePortTls": "0",
        "tlsCertificateFilePath": certs.server_cert,
        "tlsKeyFilePath": certs.server_key,
        "tlsTrustCertsFilePath": certs.ca,
        # the broker's own credentials for the other brokers (its role "broker" is a super user)
        "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "brokerClientAuthenticationParameters": f"file://{broker_token}",
        "brokerClientTlsEnabled": "true",
        "brokerClientTrustCertsFilePath": certs.ca,
        **more,
    }
    if client_cert:
        cert, key = certs.clients["broker"]
        keys.update(
            {
                "authenticationProviders": "token,tls",
                "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationTls",
                "brokerClientAuthenticationParameters": f"tlsCertFile:{cert},tlsKeyFile:{key}",
            }
        )
    return _Secured(
        certs,
        create_token(subject="admin", secret_key=SECRET),
        create_token(subject="app", secret_key=SECRET),
        broker_token,
        keys,
    )


def test_secured_cluster_redirects_unloads_and_splits(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    sec = _secured(tmp_path)
    certs, admin_token, app_token, broker_token, args = (
        sec.certs,
        sec.admin_token,
        sec.app_token,
        sec.broker_token,
        sec.args,
    )
    ca = ssl.create_default_context(cafile=certs.ca)
    url = zookeeper.url(f"/mb-sec-{uuid.uuid4().hex[:8]}", session_timeout_ms=4000)
    cluster = MultiBrokerCluster(tmp_path, url, 2, *args).start()
    admin = {"Authorization": f"Bearer {admin_token}"}
    try:
        a, b = cluster.brokers
        (a_tls, a_https), (b_tls, b_https) = _tls_urls(a), _tls_urls(b)
        for x in (a, b):
            log = x.log()
            assert "ZooKeeper ACLs are off" in log  # the start-up SECURITY warning names zkEnableSecurity
            assert "superUserRoles: the other brokers refuse" not in log and "is not set" not in log

        assert httpx.put(f"{a.admin_url}/admin/v2/namespaces/public/anon", timeout=15).status_code == 401
        wait_until(
            lambda: len(httpx.get(f"{a.admin_url}/admin/v2/brokers", headers=admin, timeout=15).json()) == 2,
            "both brokers registered",
            timeout_s=30,
        )
        ns = f"public/sec-{uuid.uuid4().hex[:6]}"
        r = httpx.put(f"{a.admin_url}/admin/v2/namespaces/{ns}", headers=admin, timeout=15)
        assert r.status_code == 204, r.text
        r = httpx.post(
            f"{a.admin_url}/admin/v2/namespaces/{ns}/permissions/app",
            json=["produce", "consume"],
            headers=admin,
            timeout=15,
        )
        assert r.status_code == 204, r.text

        looker = pulsar.Client(
            a.service_url, authentication=pulsar.AuthenticationToken(admin_token), operation_timeout_seconds=30
        )

        def owned_by_b() -> tuple[str, str]:
            """A topic of ``ns`` whose bundle broker B owns, and that bundle: lookups through A
            assign unowned bundles to the least loaded broker (a producer loads the topic there)."""
            for i in range(64):
                topic = f"persistent://{ns}/t{i}"
                looker.create_producer(topic).close()
                h = bundle_hash(topic)
                for name, owner in owners(url, ns).items():
                    if parse_bundle(name).contains(h) and owner == b.service_url:
                        return topic, name
            raise AssertionError(f"no bundle of {ns} went to broker B: {owners(url, ns)}")

        topic, bundle = owned_by_b()
        short = topic.rsplit("/", 1)[1]

        # a client of broker A (plain text, app token) produces to and consumes from B's topic
        client = pulsar.Client(
            a.service_url, authentication=pulsar.AuthenticationToken(app_token), operation_timeout_seconds=30
        )
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(
            topic, batching_enabled=False, block_if_queue_full=True, max_pending_messages=300, send_timeout_millis=60000
        )
        receipts = ReceiptLog()
        produce_until(producer, receipts, "plain", 50)
        assert owners(url, ns)[bundle] == b.service_url  # served by B, reached through A

        # the same over TLS: A's LOOKUP redirects to B's pulsar+ssl:// URL
        client_log = _Lines()
        tls_logger = logging.getLogger(f"pulsar-tls-{uuid.uuid4().hex[:6]}")
        tls_logger.addHandler(client_log)
        tls_logger.setLevel(logging.INFO)
        tls_client = pulsar.Client(
            a_tls,
            authentication=pulsar.AuthenticationToken(app_token),
            tls_trust_certs_file_path=certs.ca,
            operation_timeout_seconds=30,
            logger=tls_logger,
        )
        try:
            tls_producer = tls_client.create_producer(topic, batching_enabled=False, send_timeout_millis=60000)
            for i in range(10):
                payload = f"tls-{i}".encode()
                tls_producer.send(payload)
                with receipts.lock:
                    receipts.ok.append(payload)
            tls_producer.close()
        finally:
            tls_client.close()
        # The sends above already prove the redirect carried B's pulsar+ssl:// URL: A does not
        # serve the topic and B's plain port refuses a TLS handshake. The client's own log says it
        # directly when it reaches this logger; libpulsar keeps one process-wide logger factory
        # that a client created later (another test's) replaces, so the log may stay empty here.
        b_tls_address = b_tls.split("://", 1)[1]
        if client_log.lines:
            assert any(b_tls_address in line for line in client_log.lines), client_log.lines[-20:]

        # an https admin request on the non-owner is redirected to the owner's https URL
        r = httpx.get(f"{a_https}/admin/v2/persistent/{ns}/{short}/stats", headers=admin, verify=ca, timeout=30)
        assert r.status_code == 307 and r.headers["location"].startswith(b_https), (r.status_code, r.headers)

        # broker to broker: no credentials -> 401, a non-admin role -> 403, the broker's own -> done
        unload = f"/admin/v2/namespaces/{ns}/{bundle}/unload"
        assert httpx.put(f"{b_https}{unload}", verify=ca, timeout=30).status_code == 401
        r = httpx.put(f"{b_https}{unload}", headers={"Authorization": f"Bearer {app_token}"}, verify=ca, timeout=30)
        assert r.status_code == 403, r.text
        as_broker = BrokerClient(
            BrokerConfig(
                broker_client_authentication_plugin="token",
                broker_client_authentication_parameters=f"file://{broker_token}",
                broker_client_tls_enabled=True,
                broker_client_trust_certs_file_path=certs.ca,
            )
        )
        r = trio.run(as_broker.request, "PUT", f"{b_https}{unload}")
        assert r.status_code == 204, r.text
        decisions = httpx.get(f"{b.admin_url}/admin/v2/broker-stats/load-decisions", headers=admin, timeout=15).json()
        assert any(d["action"] == "unloaded" and d["bundle"] == f"{ns}/{bundle}" for d in decisions), decisions
        produce_until(producer, receipts, "after-direct-unload", receipts.count() + 50)

        # namespace unload asked of A: A unloads B's bundles through B with its own credentials
        _, bundle2 = owned_by_b()
        assert httpx.put(f"{a.admin_url}/admin/v2/namespaces/{ns}/unload", timeout=30).status_code == 401
        r = httpx.put(
            f"{a.admin_url}/admin/v2/namespaces/{ns}/unload",
            headers={"Authorization": f"Bearer {app_token}"},
            timeout=30,
        )
        assert r.status_code == 403, r.text
        r = httpx.put(f"{a.admin_url}/admin/v2/namespaces/{ns}/unload", headers=admin, timeout=60)
        assert r.status_code == 204, r.text
        decisions = httpx.get(f"{b.admin_url}/admin/v2/broker-stats/load-decisions", headers=admin, timeout=15).json()
        assert any(
            d["action"] == "unloaded" and d["bundle"] == f"{ns}/{bundle2}" and d["reason"] == "admin unload"
            for d in decisions
        ), decisions
        produce_until(producer, receipts, "after-ns-unload", receipts.count() + 50)

        # bundle split with `magnetar admin` on A's https port: 307 to B, the token kept across it
        _, bundle3 = owned_by_b()
        res = CliRunner().invoke(
            main,
            [
                "admin",
                "--admin-url",
                a_https,
                "--tls-trust-cert-path",
                certs.ca,
                "--token",
                admin_token,
                "namespaces",
                "split-bundle",
                ns,
                "-b",
                bundle3,
            ],
        )
        assert res.exit_code == 0, res.output
        bundles = httpx.get(f"{a.admin_url}/admin/v2/namespaces/{ns}/bundles", headers=admin, timeout=15).json()
        assert bundles["numBundles"] == 5, bundles
        res = CliRunner().invoke(
            main, ["admin", "--admin-url", a.admin_url, "--token", admin_token, "--json", "namespaces", "bundles", ns]
        )
        assert res.exit_code == 0 and json.loads(res.output)["numBundles"] == 5, res.output
        wait_until(
            lambda: not any(parse_bundle(n) == parse_bundle(bundle3) for n in owners(url, ns)),
            "the split bundle's node released",
            timeout_s=30,
        )

        produce_until(producer, receipts, "after-split", receipts.count() + 50)
        producer.flush()
        assert not receipts.failed, receipts.failed[:5]
        got = [m.data() for m in drain(consumer, wait_ms=3000)]
        missing = set(receipts.ok) - set(got)
        assert not missing, f"{len(missing)} receipted messages lost, e.g. {sorted(missing)[:5]}"
        client.close()
        looker.close()
    finally:
        cluster.close()


def test_leader_splits_a_bundle_of_the_other_broker(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """The load-manager leader's split request to the other broker carries the broker's own
    credentials, here its client certificate over https: the owner accepts it and splits its hot
    bundle."""
    sec = _secured(
        tmp_path,
        client_cert=True,
        loadBalancerSheddingIntervalMinutes="0.05",
        loadBalancerSheddingEnabled="false",
        loadBalancerNamespaceBundleMaxTopics="1",
    )
    admin = {"Authorization": f"Bearer {sec.admin_token}"}
    url = zookeeper.url(f"/mb-sec-lead-{uuid.uuid4().hex[:8]}", session_timeout_ms=4000)
    cluster = MultiBrokerCluster(tmp_path, url, 2, *sec.args).start()
    try:
        a, b = cluster.brokers

        def leader_id() -> str:
            r = httpx.get(f"{a.admin_url}/admin/v2/brokers/leaderBroker", headers=admin, timeout=15)
            return str(r.json()["brokerId"]) if r.status_code == 200 else ""

        wait_until(
            lambda: (
                len(httpx.get(f"{a.admin_url}/admin/v2/brokers", headers=admin, timeout=15).json()) == 2
                and leader_id() != ""
            ),
            "both brokers registered and a leader",
            timeout_s=30,
        )
        for x in (a, b):  # its own certificate is accepted and a super user: no SECURITY line about it
            assert "the broker client" not in x.log() and "brokerClientAuthenticationPlugin" not in x.log()
        leader = a if leader_id() == a.admin_url.split("://")[1] else b
        other = b if leader is a else a
        ns = f"public/lead-{uuid.uuid4().hex[:6]}"
        r = httpx.put(f"{a.admin_url}/admin/v2/namespaces/{ns}", headers=admin, timeout=15)
        assert r.status_code == 204, r.text

        # load topics until one of the other broker's bundles holds two of them (> max topics 1)
        client = pulsar.Client(
            leader.service_url, authentication=pulsar.AuthenticationToken(sec.admin_token), operation_timeout_seconds=30
        )
        producers = []
        per_bundle: dict[str, int] = {}
        hot = ""
        for i in range(64):
            topic = f"persistent://{ns}/t{i}"
            producers.append(client.create_producer(topic))
            h = bundle_hash(topic)
            name = next(
                (n for n, o in owners(url, ns).items() if parse_bundle(n).contains(h) and o == other.service_url), None
            )
            if name is not None:
                per_bundle[name] = per_bundle.get(name, 0) + 1
                if per_bundle[name] >= 2:
                    hot = name
                    break
        assert hot, f"no bundle of the other broker got two topics: {owners(url, ns)}"

        def split_by_leader() -> bool:
            mine = httpx.get(
                f"{other.admin_url}/admin/v2/broker-stats/load-decisions", headers=admin, timeout=15
            ).json()
            return any(d["action"] == "split" and d["bundle"] == f"{ns}/{hot}" for d in mine)

        wait_until(split_by_leader, f"the leader's split of {ns}/{hot} done on the other broker", timeout_s=90)
        decisions = httpx.get(
            f"{leader.admin_url}/admin/v2/broker-stats/load-decisions", headers=admin, timeout=15
        ).json()
        assert any(d["action"] == "auto-split" and d["bundle"] == f"{ns}/{hot}" for d in decisions), decisions
        assert "leader's split of" not in leader.log()  # no refused (401/403) request
        for p in producers:
            p.close()
        client.close()
    finally:
        cluster.close()


@pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper (Debian's zookeeper package) or java is missing")
def test_cluster_launcher_with_security(tmp_path: Path) -> None:
    """``magnetar cluster start`` with the secured keys and per-broker TLS ports, and ZooKeeper
    digest ACLs on every component (AutoRecovery included): TLS clients with a token use both
    brokers through one service URL; a namespace unload through broker 0 works; AutoRecovery runs
    and a ZooKeeper session without the credential can read none of the cluster's nodes."""
    sec = _secured(tmp_path)
    keys = {k: v for k, v in sec.keys.items() if k not in ("brokerServicePortTls", "webServicePortTls")}
    sets = [x for k, v in keys.items() for x in ("--broker-set", f"broker.{k}={v}")]
    zk_acl = ("zkEnableSecurity=true", f"zkDigestCredentials={ZK_CREDENTIAL}")
    sets += [
        x for kv in zk_acl for x in ("--broker-set", f"cluster.{kv}", "--bookie-set", kv, "--autorecovery-set", kv)
    ]
    zk_port = free_port()
    ca = ssl.create_default_context(cafile=sec.certs.ca)
    admin = {"Authorization": f"Bearer {sec.admin_token}"}
    d = tmp_path / "cluster"
    started = False
    try:
        run_magnetar(
            "cluster",
            "start",
            "--dir",
            str(d),
            "--brokers",
            "2",
            "--zk-port",
            str(zk_port),
            "--broker-port",
            "0",
            "--web-port",
            "0",
            "--broker-tls-port",
            "0",
            "--web-tls-port",
            "0",
            "--bookie-port",
            "0",
            "--bookie-http-port",
            "0",
            *sets,
        )
        started = True
        status = json.loads(run_magnetar("cluster", "status", "--dir", str(d), "--json"))
        assert all(p["running"] for p in status["processes"]), status  # AutoRecovery too
        stranger = KazooClient(hosts=f"127.0.0.1:{zk_port}")
        stranger.start(timeout=10)
        try:
            for path in ("/magnetar/ledgers", "/magnetar/ledgers/available"):
                with pytest.raises(NoAuthError):
                    stranger.get(path)
        finally:
            stranger.stop()
            stranger.close()
        brokers = status["brokers"]
        assert all(
            b["service_url_tls"].startswith("pulsar+ssl://") and b["admin_url_tls"].startswith("https://")
            for b in brokers
        ), brokers
        https = brokers[0]["admin_url_tls"]
        assert httpx.get(f"{https}/admin/v2/brokers", verify=ca, timeout=15).status_code == 401
        wait_until(
            lambda: len(httpx.get(f"{https}/admin/v2/brokers", headers=admin, verify=ca, timeout=15).json()) == 2,
            "both brokers registered",
            timeout_s=30,
        )
        ns = f"public/launch-{uuid.uuid4().hex[:6]}"
        assert httpx.put(f"{https}/admin/v2/namespaces/{ns}", headers=admin, verify=ca, timeout=15).status_code == 204
        r = httpx.post(
            f"{https}/admin/v2/namespaces/{ns}/permissions/app",
            json=["produce", "consume"],
            headers=admin,
            verify=ca,
            timeout=15,
        )
        assert r.status_code == 204, r.text

        service_url = "pulsar+ssl://" + ",".join(b["service_url_tls"].split("://")[1] for b in brokers)
        client = pulsar.Client(
            service_url,
            authentication=pulsar.AuthenticationToken(sec.app_token),
            tls_trust_certs_file_path=sec.certs.ca,
            operation_timeout_seconds=30,
        )
        topics = [f"persistent://{ns}/t{i}" for i in range(8)]
        consumers = [client.subscribe(t, "s", initial_position=pulsar.InitialPosition.Earliest) for t in topics]
        producers = [client.create_producer(t, batching_enabled=False, send_timeout_millis=60000) for t in topics]
        for t, p in zip(topics, producers, strict=True):
            p.send(f"{t}-0".encode())
        # every bundle's owner unloads it, asked by broker 0 with its own credentials over https
        r = httpx.put(f"{https}/admin/v2/namespaces/{ns}/unload", headers=admin, verify=ca, timeout=60)
        assert r.status_code == 204, r.text
        for t, p in zip(topics, producers, strict=True):
            p.send(f"{t}-1".encode())
        for t, c in zip(topics, consumers, strict=True):
            assert [m.data() for m in drain(c)] == [f"{t}-{i}".encode() for i in range(2)]
        client.close()
    finally:
        if started or (d / "cluster.json").exists():
            run_magnetar("cluster", "stop", "--dir", str(d))
