"""``magnetar autorecovery`` options and ``AutoRecoveryConfig`` validation."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from autorecovery import AutoRecoveryConfig
from magnetar.cli import main
from magnetar.common.config import ConfigError, load_config


def test_config_aliases_and_validation() -> None:
    cfg = load_config(
        AutoRecoveryConfig,
        {"lostBookieRecoveryDelay": 60.0},
        {"auditorPeriodicCheckInterval": "0", "replication_workers": "3"},
    )
    assert cfg.lost_bookie_recovery_delay_s == 60 and cfg.auditor_periodic_check_interval_s == 0
    assert cfg.replication_workers == 3
    with pytest.raises(ConfigError) as err:
        AutoRecoveryConfig(retry_backoff_min_s=5, retry_backoff_max_s=1)
    assert err.value.key == "retry_backoff_max_s"
    with pytest.raises(ConfigError):
        AutoRecoveryConfig(lost_bookie_recovery_delay_s=-1)


def test_cli_help_and_bad_settings(tmp_path: Path) -> None:
    runner = CliRunner()
    assert "autorecovery" in runner.invoke(main, ["--help"]).output
    result = runner.invoke(main, ["autorecovery", "--help"])
    assert result.exit_code == 0 and "--metadata-url" in result.output
    result = runner.invoke(main, ["autorecovery", "--metadata-url", "memory://x", "--set", "no_such_key=1"])
    assert result.exit_code != 0 and "no_such_key" in result.output
    conf = tmp_path / "m.toml"
    conf.write_text("[autorecovery]\nreplication_workers = -1\n")
    result = runner.invoke(main, ["autorecovery", "--metadata-url", "memory://x", "--conf", str(conf)])
    assert result.exit_code != 0 and "replication_workers" in result.output
