"""The Spark source and sink against a TLS-only standalone with token authentication and
authorization: the official client inside them connects over pulsar+ssl:// with
``pulsar.client.*`` options (trusted CA, AuthenticationToken), the driver's admin REST calls go
over https with the same token, and ``readMode=bookies`` reads the bookies over TLS with the
BookKeeper client's certificate (``bookkeeper.*`` options; the bookies require one). Without the
token the broker refuses the source with HTTP 401."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pytest

from sinks.spark._options import SourceOptions
from tests.spark.spark_harness import SparkEnv, unique, values_of
from tests.support.bookies import REPO
from tests.support.certs import Certs, make_certs
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

_READY = re.compile(r"broker TLS: (pulsar\+ssl://\S+)\s+admin REST TLS: (https://\S+)")


@dataclass
class SecureStandalone:
    """A TLS + token standalone subprocess and what a client needs to reach it."""

    proc: subprocess.Popen[str]
    service_url: str
    admin_url: str
    metadata_url: str
    certs: Certs
    token_file: str

    def client_options(self, *, token: bool = True) -> dict[str, str]:
        """The Spark options of a client of this standalone (``pulsar.client.*``)."""
        opts = {
            "service.url": self.service_url,
            "admin.url": self.admin_url,
            "pulsar.client.tlsTrustCertsFilePath": self.certs.ca,
            "pulsar.client.tlsHostnameVerificationEnable": "true",
        }
        if token:
            opts |= {
                "pulsar.client.authPluginClassName": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
                "pulsar.client.authParams": f"file://{self.token_file}",
            }
        return opts

    def bookie_options(self) -> dict[str, str]:
        """``readMode=bookies`` over TLS with the client certificate the bookies require."""
        return {
            "readMode": "bookies",
            "metadata.url": self.metadata_url,
            "bookkeeper.tls_enabled": "true",
            "bookkeeper.tlsTrustStore": self.certs.ca,
            "bookkeeper.tlsCertificatePath": self.certs.client_cert,
            "bookkeeper.tlsKeyStore": self.certs.client_key,
        }


@pytest.fixture(scope="module")
def secure(
    spark_env: SparkEnv, zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureStandalone]:
    from broker.auth import create_token, new_secret_key

    tmp = tmp_path_factory.mktemp("spark-secure")
    certs = make_certs(tmp / "certs")
    secret = tmp / "secret.key"
    secret.write_bytes(new_secret_key())
    token_file = tmp / "spark.token"
    token_file.write_text(create_token("spark-admin", secret_key=secret.read_bytes()))
    url = zookeeper.url(f"/spark-secure-{uuid.uuid4().hex[:8]}")
    conf = tmp / "secure.toml"
    conf.write_text(
        "\n".join(
            [
                "[standalone]",
                "bookie_port = 0",
                "bookie_http_port = 0",
                f'metadata_url = "{url}"',
                "[broker]",
                'brokerServicePort = ""',
                'webServicePort = ""',
                "brokerServicePortTls = 0",
                "webServicePortTls = 0",
                f'tlsCertificateFilePath = "{certs.server_cert}"',
                f'tlsKeyFilePath = "{certs.server_key}"',
                f'tlsTrustCertsFilePath = "{certs.ca}"',
                "authenticationEnabled = true",
                'authenticationProviders = ["token"]',
                f'tokenSecretKey = "file://{secret}"',
                "authorizationEnabled = true",
                'superUserRoles = ["spark-admin"]',
                "[bookie]",
                "tls_enabled = true",
                "tlsClientAuthentication = true",
                f'tlsCertificatePath = "{certs.server_cert}"',
                f'tlsKeyStore = "{certs.server_key}"',
                f'tlsTrustStore = "{certs.ca}"',
                "[bk_client]",
                "tls_enabled = true",
                f'tlsTrustStore = "{certs.ca}"',
                f'tlsCertificatePath = "{certs.client_cert}"',
                f'tlsKeyStore = "{certs.client_key}"',
                "[managed_ledger]",
                "max_entries_per_ledger = 20",
                "min_ledger_rollover_time_minutes = 0",
            ]
        )
        + "\n"
    )
    log = tmp / "standalone.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "magnetar", "standalone", "--conf", str(conf), "--data-dir", str(tmp / "data")],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        deadline = time.monotonic() + 90
        while not (match := _READY.search(log.read_text(errors="replace"))):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"secure standalone did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield SecureStandalone(proc, match.group(1), match.group(2), url, certs, str(token_file))
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _produce(s: SecureStandalone, topic: str, values: list[bytes]) -> None:
    client = pulsar.Client(
        s.service_url,
        tls_trust_certs_file_path=s.certs.ca,
        tls_validate_hostname=True,
        authentication=pulsar.AuthenticationToken(Path(s.token_file).read_text()),
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        producer = client.create_producer(topic)
        for v in values:
            producer.send(v)
    finally:
        client.close()


def _read(spark_env: SparkEnv, options: dict[str, str]) -> list:
    reader = spark_env.spark.read.format("magnetar")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load().collect()


def test_source_and_sink_over_tls_with_a_token(spark_env: SparkEnv, secure: SecureStandalone) -> None:
    assert secure.service_url.startswith("pulsar+ssl://") and secure.admin_url.startswith("https://")
    src = f"persistent://public/default/{unique('secure-in')}"
    values = [f"v-{i:03d}".encode() for i in range(30)]  # two ledgers of 20 entries
    _produce(secure, src, values)

    by_broker = _read(spark_env, {**secure.client_options(), "topic": src})
    assert values_of(by_broker) == values
    by_bookies = _read(spark_env, {**secure.client_options(), **secure.bookie_options(), "topic": src})
    assert values_of(by_bookies) == values

    dst = f"persistent://public/default/{unique('secure-out')}"
    df = spark_env.spark.readStream.format("magnetar")
    for k, v in {**secure.client_options(), "topic": src, "startingOffsets": "earliest"}.items():
        df = df.option(k, v)
    writer = df.load().select("value").writeStream.format("magnetar")
    for k, v in {**secure.client_options(), "topic": dst}.items():
        writer = writer.option(k, v)
    q = writer.option("checkpointLocation", spark_env.checkpoint()).trigger(availableNow=True).start()
    q.awaitTermination(180)
    assert q.exception() is None
    assert sorted(values_of(_read(spark_env, {**secure.client_options(), "topic": dst}))) == values


def test_source_without_the_token_is_refused(spark_env: SparkEnv, secure: SecureStandalone) -> None:
    with pytest.raises(Exception) as e:  # Spark wraps the source's error in its own
        _read(spark_env, {**secure.client_options(token=False), "topic": "persistent://public/default/x"})
    assert "401" in str(e.value), str(e.value)[-2000:]


def test_security_options_are_checked(tmp_path: Path) -> None:
    base = {"service.url": "pulsar+ssl://h:6651", "admin.url": "https://h:8443", "topic": "t"}
    with pytest.raises(ValueError, match=r"pulsar\.client\.authPluginClassName"):
        SourceOptions.parse(
            {**base, "pulsar.client.authPluginClassName": "org.example.Kerberos", "pulsar.client.authParams": "x"}
        )
    with pytest.raises(ValueError, match=r"pulsar\.client\.authParams"):
        SourceOptions.parse({**base, "pulsar.client.authPluginClassName": "token"})
    with pytest.raises(ValueError, match="tlsTrustCertsFilePath"):
        SourceOptions.parse({**base, "pulsar.client.tlsTrustCertsFilePath": str(tmp_path / "missing.pem")})
    with pytest.raises(ValueError, match=r"bookkeeper\.nosuchkey"):
        SourceOptions.parse({**base, "bookkeeper.noSuchKey": "1"})
    with pytest.raises(ValueError, match=r"metadata\.zkDigestCredentials"):
        SourceOptions.parse({**base, "metadata.zkDigestCredentials": "no-colon"})
    ca = str(make_certs(tmp_path / "certs").ca)
    opts = SourceOptions.parse(
        {
            **base,
            "pulsar.client.authPluginClassName": "basic",
            "pulsar.client.authParams": '{"userId": "u", "password": "s3cret"}',
            "bookkeeper.tlsTrustStore": ca,
            "bookkeeper.TLS_ENABLED": "true",
        }
    )
    assert opts.security.auth_method == "basic" and "s3cret" not in repr(opts.security)
    assert dict(opts.read_config().bookkeeper_options) == {"tls_trust_store": ca, "tls_enabled": "true"}
    assert opts.security.http_kwargs()["headers"]["Authorization"] == "Basic dTpzM2NyZXQ="
