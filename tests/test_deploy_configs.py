"""The sample configs in deploy/ are current and load to the defaults."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from bk_client import ClientConfig
from bookie import BookieConfig
from broker import BrokerConfig
from magnetar.cli._common import load_sections
from magnetar.cli._security import PASSWORD_PLACEHOLDER
from magnetar.cli.cmd_broker import ClusterConfig
from magnetar.common.config import ConfigError
from magnetar.stack import STANDALONE_DEFAULTS, StandaloneConfig
from managed_ledger import ManagedLedgerConfig
from tiered_storage import TieredStorageConfig

ROOT = Path(__file__).resolve().parent.parent


def test_generated_samples_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_configs.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_standalone_sample_loads_to_defaults() -> None:
    sections = {
        "standalone": StandaloneConfig,
        "broker": BrokerConfig,
        "bookie": BookieConfig,
        "managed_ledger": ManagedLedgerConfig,
        "bk_client": ClientConfig,
        "offload": TieredStorageConfig,
    }
    cfg = load_sections(ROOT / "deploy" / "standalone.toml", sections, ())
    # the defaults of `magnetar standalone`: the components' own, but listening on loopback
    assert cfg == load_sections(None, sections, (), defaults=STANDALONE_DEFAULTS)


def test_broker_sample_loads_to_defaults() -> None:
    sections = {
        "cluster": ClusterConfig,
        "broker": BrokerConfig,
        "managed_ledger": ManagedLedgerConfig,
        "bk_client": ClientConfig,
        "offload": TieredStorageConfig,
    }
    cfg = load_sections(ROOT / "deploy" / "broker.toml", sections, ())
    # except the ledger password: the cluster sample never ships the empty default
    assert cfg["managed_ledger"].password == PASSWORD_PLACEHOLDER
    assert cfg["managed_ledger"] == dataclasses.replace(ManagedLedgerConfig(), password=PASSWORD_PLACEHOLDER)
    assert all(cfg[name] == cls() for name, cls in sections.items() if name != "managed_ledger")


def test_sectioned_overrides_and_errors(tmp_path: Path) -> None:
    sections = {"standalone": StandaloneConfig, "broker": BrokerConfig}
    cfg = load_sections(None, sections, ("broker.brokerServicePort=7000", "standalone.num_bookies=3"))
    assert cfg["broker"].broker_service_port == 7000 and cfg["standalone"].num_bookies == 3
    with pytest.raises(ConfigError) as err:
        load_sections(None, sections, ("nosuch.key=1",))
    assert err.value.key == "nosuch.key"
    bad = tmp_path / "bad.toml"
    bad.write_text("[broker]\nbrokerServicePort = 'x'\n")
    with pytest.raises(ConfigError) as err:
        load_sections(bad, sections, ())
    assert err.value.key == "broker.brokerServicePort"
    bad.write_text("[brokr]\n")
    with pytest.raises(ConfigError) as err:
        load_sections(bad, sections, ())
    assert err.value.key == "brokr"
