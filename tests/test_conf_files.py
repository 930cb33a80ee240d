"""``--conf`` takes Pulsar's and BookKeeper's own properties files (`magnetar.cli._conf_files`).

Keys Magnetar implements are applied, keys Pulsar or BookKeeper define that it does not are named
in one start-up warning, keys nobody defines stop start-up. Checked with files that set every key
of Pulsar 4.0's standalone.conf and BookKeeper 4.17's bk_server.conf (tests/conf_samples, key names and
shipped values only), and with the broker config the official Go client's CI runs its tests
against, taken from that client's module source as the Go module proxy serves it.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from autorecovery import AutoRecoveryConfig
from bk_client import ClientConfig
from bookie import BookieConfig
from broker import BrokerConfig
from magnetar.cli._common import load_sections
from magnetar.cli._conf_files import known_foreign_keys, read_conf, route_properties
from magnetar.cli.cmd_bookie import _load as load_bookie_config
from magnetar.common.config import ConfigError, key_names, parse_properties, parse_value
from magnetar.stack import STANDALONE_DEFAULTS, StandaloneConfig
from managed_ledger import ManagedLedgerConfig

SAMPLES = Path(__file__).parent / "conf_samples"
PULSAR_STANDALONE = SAMPLES / "pulsar-4.0-standalone.conf"
BOOKKEEPER_SERVER = SAMPLES / "bookkeeper-4.17-bk_server.conf"

STANDALONE_SECTIONS: dict[str, type] = {
    "standalone": StandaloneConfig,
    "broker": BrokerConfig,
    "bookie": BookieConfig,
    "managed_ledger": ManagedLedgerConfig,
    "bk_client": ClientConfig,
}


def _load_standalone(conf: Path, *overrides: str) -> dict[str, Any]:
    return load_sections(conf, STANDALONE_SECTIONS, overrides, defaults=STANDALONE_DEFAULTS, command="standalone")


def _warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The keys named by the one "ignored" warning (asserting there is exactly one)."""
    lines = [r.getMessage() for r in caplog.records if "are ignored:" in r.getMessage()]
    assert len(lines) == 1, lines
    return lines[0].split("are ignored: ", 1)[1].split(", ")


# ------------------------------------------------------------------ routing rules


def test_keys_go_to_every_table_that_takes_them() -> None:
    tables, ignored = route_properties(
        {
            "advertisedAddress": "h1",
            "clusterName": "c",
            "managedLedgerDefaultEnsembleSize": "1",
            "bookkeeper_nettyMaxFrameSizeBytes": "6000000",
            "tlsEnabled": "true",
            "journal_queue_max_mb": "8",
        },
        STANDALONE_SECTIONS,
    )
    assert tables["broker"] == {"advertisedAddress": "h1", "clusterName": "c"}
    assert tables["bookie"] == {"advertisedAddress": "h1", "journal_queue_max_mb": "8"}
    assert tables["managed_ledger"] == {"managedLedgerDefaultEnsembleSize": "1"}
    assert tables["bk_client"] == {"nettyMaxFrameSizeBytes": "6000000"}  # Pulsar's pass-through prefix
    assert ignored == ["tlsEnabled"]


def test_a_key_nobody_defines_stops_start_up_naming_it() -> None:
    with pytest.raises(ConfigError) as info:
        route_properties({"clusterName": "c", "brokerServicePrt": "6650"}, STANDALONE_SECTIONS)
    assert info.value.key == "brokerServicePrt"
    # a Magnetar key of another command is not this command's key either
    with pytest.raises(ConfigError, match="journal_queue_max_mb"):
        route_properties({"journal_queue_max_mb": "8"}, {"broker": BrokerConfig})


def test_bookkeeper_ledgers_root_is_translated_to_magnetars_root() -> None:
    tables, _ = route_properties({"zkLedgersRootPath": "/ledgers"}, {"bookie": BookieConfig})
    assert tables["bookie"] == {"zkLedgersRootPath": ""}
    tables, _ = route_properties({"zkLedgersRootPath": "/cluster-a/ledgers"}, {"bookie": BookieConfig})
    assert tables["bookie"] == {"zkLedgersRootPath": "/cluster-a"}
    with pytest.raises(ConfigError, match="zkLedgersRootPath"):
        route_properties({"zkLedgersRootPath": "/bk"}, {"bookie": BookieConfig})


def test_format_follows_the_file_name_then_the_content(tmp_path: Path) -> None:
    toml = tmp_path / "magnetar.toml"
    toml.write_text('[broker]\nclusterName = "c"\n')
    props = tmp_path / "broker.conf"
    props.write_text("clusterName=c\n")
    guessed_toml = tmp_path / "cfg"
    guessed_toml.write_text('[broker]\nclusterName = "c"\n')
    guessed_props = tmp_path / "cfg.txt"
    guessed_props.write_text("clusterName=c\nsuperUserRoles=admin,ops\n")
    assert not read_conf(toml).is_properties and read_conf(toml).toml == {"broker": {"clusterName": "c"}}
    assert read_conf(props).properties == {"clusterName": "c"}
    assert not read_conf(guessed_toml).is_properties
    assert read_conf(guessed_props).properties == {"clusterName": "c", "superUserRoles": "admin,ops"}


def test_toml_list_keys_take_pulsars_comma_separated_string(tmp_path: Path) -> None:
    conf = tmp_path / "standalone.toml"
    conf.write_text('[broker]\nsuperUserRoles = "admin,ops"\nauthenticationProviders = "token, basic"\n')
    broker = _load_standalone(conf)["broker"]
    assert broker.super_user_roles == ("admin", "ops")
    assert broker.authentication_providers == ("token", "basic")


def test_properties_file_values_flags_and_overrides(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = tmp_path / "standalone.conf"
    conf.write_text(
        "# as users edit them\nclusterName=edited\nbindAddress=\nsuperUserRoles=admin, ops\n"
        "brokerServicePortTls=\nbrokerDeduplicationEnabled=TRUE\nmanagedLedgerDefaultAckQuorum=1\n"
        "statusFilePath=/usr/local/apache/htdocs\n"
        "advertisedListeners=internal:pulsar://10.0.0.5:6650,external:pulsar+ssl://broker.example.com:6651\n"
        "managedLedgerMinLedgerRolloverTimeMinutes=0\nmanagedLedgerCacheSizeMB=512\n"
    )
    with caplog.at_level(logging.WARNING, logger="magnetar"):
        cfg = _load_standalone(conf, "broker.clusterName=from-the-command-line")
    broker = cfg["broker"]
    assert broker.cluster_name == "from-the-command-line"
    assert broker.bind_address == "127.0.0.1"  # blank: standalone's own default stays
    assert broker.super_user_roles == ("admin", "ops")
    assert broker.broker_service_port_tls is None
    assert broker.broker_deduplication_enabled is True
    assert cfg["managed_ledger"].ack_quorum == 1
    # a duration and a size in the unit their names give, a map in Pulsar's syntax
    assert (cfg["managed_ledger"].minimum_rollover_time_s, cfg["managed_ledger"].cache_size_mb) == (0.0, 512.0)
    listeners, internal = broker.listeners()
    assert internal == "internal" and listeners["external"].service_url_tls == "pulsar+ssl://broker.example.com:6651"
    assert _warned(caplog) == ["statusFilePath"]


# ------------------------------------------------------------------ every key of the shipped files


def _check_every_key(
    properties: dict[str, str], sections: dict[str, type], configs: dict[str, Any], warned: list[str]
) -> None:
    """Each key is either applied to every table that takes it (its value is the field's, where the
    file gives one) or named in the warning; none is both or neither."""
    known = known_foreign_keys()
    applied = set()
    for name, cls in sections.items():
        names = key_names(cls)
        for key, value in properties.items():
            if key not in names:
                continue
            applied.add(key)
            if value.strip() and key not in ("zkLedgersRootPath",):  # translated (tested above)
                one = parse_value(cls, key, value)
                assert getattr(configs[name], names[key]) == one, (name, key, value)
    assert applied.isdisjoint(warned)
    assert applied | set(warned) == set(properties)
    assert all(any(key in keys for keys in known.values()) for key in warned)


def test_every_key_of_pulsars_standalone_conf(caplog: pytest.LogCaptureFixture) -> None:
    properties = parse_properties(PULSAR_STANDALONE.read_text())
    assert len(properties) > 300
    with caplog.at_level(logging.WARNING, logger="magnetar"):
        cfg = _load_standalone(PULSAR_STANDALONE)
    warned = _warned(caplog)
    _check_every_key(properties, STANDALONE_SECTIONS, cfg, warned)
    # what Pulsar's standalone ships, applied: its own ensemble 1/1/1, its bookie without fsync
    assert (cfg["managed_ledger"].ensemble_size, cfg["managed_ledger"].ack_quorum) == (1, 1)
    assert cfg["bookie"].journal_sync_data is False
    assert cfg["broker"].broker_delete_inactive_topics_enabled is True
    assert "transactionMetadataStoreProviderClassName" in warned and "brokerServicePort" not in warned
    assert "transactionCoordinatorEnabled" not in warned


def test_every_key_of_bookkeepers_bk_server_conf(caplog: pytest.LogCaptureFixture) -> None:
    properties = parse_properties(BOOKKEEPER_SERVER.read_text())
    assert len(properties) > 200
    with caplog.at_level(logging.WARNING, logger="magnetar"):
        bookie = load_bookie_config(BOOKKEEPER_SERVER, None, None, None, None, None, None, ())
    _check_every_key(properties, {"bookie": BookieConfig}, {"bookie": bookie}, _warned(caplog))
    assert bookie.journal_directories == ("/tmp/bk-txn",) and bookie.ledger_dirs == ("/tmp/bk-data",)
    assert bookie.metadata_root == "" and bookie.listen_address == "eth0"  # an interface, as in BookKeeper
    assert not bookie.http_enabled


def test_bk_server_conf_for_autorecovery(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from magnetar.cli.cmd_autorecovery import command

    tables, ignored = route_properties(
        parse_properties(BOOKKEEPER_SERVER.read_text()), {"autorecovery": AutoRecoveryConfig, "bk_client": ClientConfig}
    )
    assert tables["autorecovery"]["rereplicationEntryBatchSize"] == "10"
    assert "journalDirectory" in ignored
    bad = tmp_path / "bk_server.conf"
    bad.write_text("lostBookieRecoveryDelay=0\nnotAKey=1\n")
    result = CliRunner().invoke(command, ["--metadata-url", "memory://x", "--conf", str(bad)])
    assert result.exit_code != 0 and "notAKey" in result.output


def test_bind_host_takes_an_interface_name_as_bookkeeper_does() -> None:
    from bookie.server._process import bind_host

    assert bind_host("lo") == "127.0.0.1"
    assert bind_host("127.0.0.1") == "127.0.0.1" and bind_host("localhost") == "localhost"
    assert bind_host("") is None


# ------------------------------------------------------------------ the Go client's CI broker config


@pytest.fixture(scope="module")
def go_client_module() -> Path:
    """The source of the latest pulsar-client-go release, from the Go module proxy."""
    if shutil.which("go") is None:
        pytest.skip("the go command is not installed (needed to fetch pulsar-client-go from the module proxy)")
    try:
        out = subprocess.run(
            ["go", "mod", "download", "-json", "github.com/apache/pulsar-client-go@latest"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd="/",
        )
    except subprocess.TimeoutExpired:
        pytest.skip("the Go module proxy did not answer within 300 s")
    if out.returncode != 0:
        pytest.skip(f"the Go module proxy is unreachable: {(out.stdout + out.stderr).strip()[-300:]}")
    return Path(json.loads(out.stdout)["Dir"])


def go_ci_conf(module: Path, tmp_path: Path) -> Path:
    """The Go client's integration-tests/conf/standalone.conf with its container paths (/pulsar/certs,
    /pulsar/tokens, where its Dockerfile copies them) pointing into the module's integration-tests."""
    tests = module / "integration-tests"
    text = (tests / "conf" / "standalone.conf").read_text()
    text = text.replace("/pulsar/certs/", f"{tests}/certs/").replace("/pulsar/tokens/", f"{tests}/tokens/")
    conf = tmp_path / "standalone.conf"
    conf.write_text(text)
    return conf


def _basic_auth_override(module: Path) -> str:
    # its Dockerfile passes this file as the JVM property pulsar.auth.basic.conf
    return f"broker.basicAuthConf={module / 'integration-tests' / 'conf' / '.htpasswd'}"


GO_CI_APPLIED = {
    "broker": {
        "broker_service_port": 6650,
        "broker_service_port_tls": 6651,
        "web_service_port": 8080,
        "web_service_port_tls": 8443,
        "advertised_address": "localhost",
        "cluster_name": "standalone",
        "max_message_size": 1048576,
        "anonymous_user_role": "anonymous",
        "authentication_enabled": True,
        "authorization_enabled": True,
        "super_user_roles": ("localhost", "superUser", "admin"),
        "broker_client_tls_enabled": True,
        "broker_delete_inactive_topics_enabled": True,
        "broker_delete_inactive_topics_frequency_s": 60,
        "max_unacked_messages_per_consumer": 50000,
        "allow_auto_topic_creation_type": "non-partitioned",
        "load_balancer_enabled": False,
        "backlog_quota_default_limit_gb": 10.0,
    },
    "managed_ledger": {"ensemble_size": 1, "write_quorum": 1, "ack_quorum": 1, "cache_size_mb": 1024.0},
}


def test_go_client_ci_conf_parses_and_applies(
    go_client_module: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conf = go_ci_conf(go_client_module, tmp_path)
    with caplog.at_level(logging.WARNING, logger="magnetar"):
        cfg = _load_standalone(conf, _basic_auth_override(go_client_module))
    for section, expected in GO_CI_APPLIED.items():
        assert {k: getattr(cfg[section], k) for k in expected} == expected, section
    broker = cfg["broker"]
    assert broker.authentication_providers == tuple(
        f"org.apache.pulsar.broker.authentication.AuthenticationProvider{p}" for p in ("Tls", "Token", "Basic")
    )
    assert Path(broker.tls_certificate_file_path).is_file() and broker.token_secret_key.startswith("file://")
    warned = _warned(caplog)
    assert {
        "tlsEnabled",
        "transactionMetadataStoreProviderClassName",
        "statusFilePath",
        "clientLibraryVersionCheckAllowUnversioned",
    } <= set(warned)
    assert "brokerServicePortTls" not in warned and "superUserRoles" not in warned


@pytest.mark.slow
def test_standalone_starts_with_the_go_client_ci_conf(go_client_module: Path, tmp_path: Path) -> None:
    import pulsar

    from tests.support.standalone import start_standalone

    tests = go_client_module / "integration-tests"
    conf = go_ci_conf(go_client_module, tmp_path)
    s = start_standalone(
        tmp_path / "data",
        "--conf",
        str(conf),
        "--set",
        _basic_auth_override(go_client_module),
        "--set",
        "broker.brokerServicePortTls=0",
        "--set",
        "broker.webServicePortTls=0",
        "--set",
        "broker.bindAddress=127.0.0.1",
    )
    try:
        log = s.log()
        tls = re.search(r"broker TLS: (pulsar\+ssl://\S+)\s+admin REST TLS: (https://\S+)", log)
        assert tls, log
        assert re.search(
            r"key\(s\) of .*standalone\.conf are defined by Pulsar or BookKeeper but not "
            r"implemented .* ignored: .*\btlsEnabled\b",
            log,
        ), log
        token = (tests / "tokens" / "admin-token").read_text().strip()
        client = pulsar.Client(
            tls.group(1),
            authentication=pulsar.AuthenticationToken(token),
            tls_trust_certs_file_path=str(tests / "certs" / "cacert.pem"),
            operation_timeout_seconds=15,
        )
        try:
            consumer = client.subscribe("persistent://public/default/go-ci-conf", "sub")
            client.create_producer("persistent://public/default/go-ci-conf").send(b"over TLS with a token")
            assert consumer.receive(15000).data() == b"over TLS with a token"
        finally:
            client.close()
        # the client certificate (CN=admin, a super user) authenticates through the TLS provider
        client = pulsar.Client(
            tls.group(1),
            tls_trust_certs_file_path=str(tests / "certs" / "cacert.pem"),
            authentication=pulsar.AuthenticationTLS(
                str(tests / "certs" / "client-cert.pem"), str(tests / "certs" / "client-key.pem")
            ),
            operation_timeout_seconds=15,
        )
        try:
            client.create_producer("persistent://public/default/go-ci-conf").send(b"with a certificate")
        finally:
            client.close()
    finally:
        assert s.stop() == 0, s.log()


def test_standalone_command_stops_on_a_key_nobody_defines(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from magnetar.cli import main

    conf = tmp_path / "standalone.conf"
    conf.write_text("clusterName=standalone\nbrokerServicePrt=6650\n")
    result = CliRunner().invoke(main, ["standalone", "--conf", str(conf), "--data-dir", str(tmp_path / "d")])
    assert result.exit_code == 2, result.output  # a bad configuration: nothing started
    assert "brokerServicePrt" in result.output
