"""The start-up warning of cluster brokers and bookies left unsecured (magnetar.cli._security)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from bookie import BookieConfig
from broker import BrokerConfig
from magnetar.cli import main
from magnetar.cli._security import PASSWORD_PLACEHOLDER, bookie_security_warning, broker_security_warning
from managed_ledger import ManagedLedgerConfig

ZK = "zk://127.0.0.1:2181"


def test_broker_warning_names_the_keys() -> None:
    warning = broker_security_warning(ZK, BrokerConfig(), ManagedLedgerConfig(), zk_enable_security=False)
    assert warning is not None
    for key in (
        "authenticationEnabled",
        "authenticationProviders",
        "authorizationEnabled",
        "superUserRoles",
        "managedLedgerPassword",
        "zkEnableSecurity",
        "zkDigestCredentials",
    ):
        assert key in warning
    placeholder = broker_security_warning(
        ZK, BrokerConfig(), ManagedLedgerConfig(password=PASSWORD_PLACEHOLDER), zk_enable_security=True
    )
    assert placeholder is not None and "placeholder" in placeholder and "zkEnableSecurity" not in placeholder
    secured = BrokerConfig(
        authentication_enabled=True,
        authentication_providers=("token",),
        token_secret_key="data:;base64,c2VjcmV0",
        authorization_enabled=True,
    )
    assert broker_security_warning(ZK, secured, ManagedLedgerConfig(password="s3cret"), zk_enable_security=True) is None
    only_password = broker_security_warning(ZK, secured, ManagedLedgerConfig(), zk_enable_security=True)
    assert only_password is not None and "authenticationEnabled" not in only_password
    # everything secured but ZooKeeper's ACLs: anyone reaching ZooKeeper rewrites ownership and metadata
    only_zk = broker_security_warning(ZK, secured, ManagedLedgerConfig(password="s3cret"), zk_enable_security=False)
    assert only_zk is not None and "ZooKeeper ACLs are off" in only_zk and "[cluster] zkEnableSecurity" in only_zk
    assert "authenticationEnabled" not in only_zk
    # standalone / embedded metadata: not a cluster, no warning
    assert (
        broker_security_warning("embedded:///tmp/x", BrokerConfig(), ManagedLedgerConfig(), zk_enable_security=False)
        is None
    )


def test_bookie_warning_names_the_keys() -> None:
    warning = bookie_security_warning(BookieConfig(metadata_url=ZK))
    assert warning is not None and "tls_enabled" in warning and "tlsClientAuthentication" in warning
    assert "[bookie] zkEnableSecurity" in warning
    assert bookie_security_warning(BookieConfig(metadata_url="")) is None
    tls_only = BookieConfig(metadata_url=ZK, tls_enabled=True, tls_client_authentication=True)
    only_zk = bookie_security_warning(tls_only)
    assert only_zk is not None and "ZooKeeper ACLs are off" in only_zk and "tlsClientAuthentication" not in only_zk
    secured = BookieConfig(
        metadata_url=ZK,
        tls_enabled=True,
        tls_client_authentication=True,
        zk_enable_security=True,
        zk_digest_credentials="magnetar:s3cret",
    )
    assert bookie_security_warning(secured) is None


def test_broker_command_logs_one_warning_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trio

    def no_run(*args: object, **kwargs: object) -> None:  # stop before connecting to ZooKeeper
        return None

    monkeypatch.setattr(trio, "run", no_run)
    with caplog.at_level(logging.WARNING):
        result = CliRunner().invoke(main, ["broker", "--metadata-url", ZK])
    assert result.exit_code == 0, result.output
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "SECURITY" in r.getMessage()]
    assert len(warnings) == 1 and "authenticationEnabled" in warnings[0].getMessage()
