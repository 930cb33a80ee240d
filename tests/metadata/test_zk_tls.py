"""TLS to ZooKeeper (`metadata.ZkTls`), configured with ZooKeeper's client properties as Pulsar's
``metadataStoreConfigPath`` file holds them, against Debian's ZooKeeper serving only a TLS port
(``secureClientPort`` on Netty) that requires client certificates."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import trio

from magnetar.common.config import ConfigError
from metadata import ConnectionLossError, ZkTls, open_metadata_store
from tests.support.zookeeper import ZkTlsFiles, ZooKeeperServer


def _url(server: ZooKeeperServer, host: str = "127.0.0.1") -> str:
    return f"zk://{host}:{server.port}/tls-{uuid.uuid4().hex[:8]}?connect_timeout_ms=3000"


# ------------------------------------------------------------------ settings from the properties


def test_properties_without_secure_mean_plain(tmp_path: Path) -> None:
    assert ZkTls.from_properties({}, "x") is None
    assert (
        ZkTls.from_properties({"zookeeper.client.secure": "false", "zookeeper.ssl.keyStore.location": "/nowhere"}, "x")
        is None
    )
    assert ZkTls.from_config_file("") is None


def test_properties_errors_name_the_property(tmp_path: Path) -> None:
    files = ZkTlsFiles.create(tmp_path / "certs")
    base = {"zookeeper.client.secure": "true", "zookeeper.ssl.trustStore.location": str(files.ca)}
    tls = ZkTls.from_properties(
        {**base, "zookeeper.ssl.keyStore.location": str(files.client), "zookeeper.ssl.hostnameVerification": "false"},
        "zk.conf",
    )
    assert tls == ZkTls(keystore=str(files.client), truststore=str(files.ca), hostname_verification=False)
    cases = [
        ({"zookeeper.ssl.keyStore.type": "JKS"}, "zookeeper.ssl.keyStore.type"),
        ({"zookeeper.ssl.trustStore.location": str(tmp_path / "missing.pem")}, "zookeeper.ssl.trustStore.location"),
        ({"zookeeper.ssl.keyStore.location": str(files.ca)}, "zookeeper.ssl.keyStore.location"),  # no key in it
    ]
    for extra, key in cases:
        with pytest.raises(ConfigError) as info:
            ZkTls.from_properties({**base, **extra}, "zk.conf")
        assert info.value.key == key and "zk.conf" in str(info.value)
    with pytest.raises(ConfigError) as missing:
        ZkTls.from_config_file(str(tmp_path / "no-such.conf"))
    assert missing.value.key == "metadataStoreConfigPath"


def test_component_configs_refuse_a_bad_client_config_at_start(tmp_path: Path) -> None:
    from autorecovery import AutoRecoveryConfig
    from bookie import BookieConfig
    from magnetar.cli.cmd_broker import ClusterConfig
    from magnetar.common.config import load_config

    conf = tmp_path / "zk-client.conf"
    conf.write_text("zookeeper.client.secure=true\nzookeeper.ssl.trustStore.type=JKS\n")
    for cls in (ClusterConfig, BookieConfig, AutoRecoveryConfig):
        with pytest.raises(ConfigError, match=r"zookeeper\.ssl\.trustStore\.type"):
            load_config(cls, {"metadataStoreConfigPath": str(conf)})


# ------------------------------------------------------------------ against a real TLS ZooKeeper


@pytest.mark.slow
async def test_a_store_over_tls_reads_and_writes(zookeeper_tls: ZooKeeperServer, tmp_path: Path) -> None:
    files = zookeeper_tls.tls
    assert files is not None
    tls = ZkTls.from_config_file(str(files.client_config(tmp_path / "zk-client.conf")))
    assert tls is not None and tls.hostname_verification
    async with open_metadata_store(_url(zookeeper_tls), tls=tls) as store:
        await store.create("/a", b"over tls")
        assert (await store.get("/a"))[0] == b"over tls"
        assert await store.children("/") == ["a"]
    # the server's certificate names localhost too
    async with open_metadata_store(_url(zookeeper_tls, "localhost"), tls=tls) as store:
        await store.create("/b", b"")


@pytest.mark.slow
async def test_tls_zookeeper_refuses_plain_and_certificateless_sessions(
    zookeeper_tls: ZooKeeperServer, tmp_path: Path
) -> None:
    files = zookeeper_tls.tls
    assert files is not None
    no_cert = ZkTls.from_config_file(str(files.client_config(tmp_path / "no-cert.conf", with_certificate=False)))
    other_ca = ZkTlsFiles.create(tmp_path / "other")
    wrong_ca = ZkTls.from_config_file(str(files.client_config(tmp_path / "wrong-ca.conf", trust=other_ca.ca)))
    for tls in (None, no_cert, wrong_ca):
        with pytest.raises(ConnectionLossError):
            with trio.fail_after(30):
                async with open_metadata_store(_url(zookeeper_tls), tls=tls):
                    pass
