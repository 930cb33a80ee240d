"""Standalone listens on loopback unless told otherwise (issue 13's safer default)."""

from __future__ import annotations

from pathlib import Path

from bookie import BookieConfig
from broker import BrokerConfig
from magnetar.cli._common import load_sections
from magnetar.stack import STANDALONE_DEFAULTS

SECTIONS = {"broker": BrokerConfig, "bookie": BookieConfig}


def test_standalone_binds_loopback_by_default() -> None:
    cfg = load_sections(None, SECTIONS, (), defaults=STANDALONE_DEFAULTS)
    assert cfg["broker"].bind_address == "127.0.0.1"
    assert (cfg["bookie"].listen_address, cfg["bookie"].http_address) == ("127.0.0.1", "127.0.0.1")
    # the components' own defaults (a cluster broker or bookie) are unchanged
    assert BrokerConfig().bind_address == "0.0.0.0"


def test_the_config_file_or_a_flag_can_open_it_up(tmp_path: Path) -> None:
    conf = tmp_path / "standalone.toml"
    conf.write_text('[broker]\nbindAddress = "0.0.0.0"\n[bookie]\nlisteningInterface = "0.0.0.0"\n')
    cfg = load_sections(conf, SECTIONS, ("bookie.http_address=0.0.0.0",), defaults=STANDALONE_DEFAULTS)
    assert cfg["broker"].bind_address == "0.0.0.0"
    assert (cfg["bookie"].listen_address, cfg["bookie"].http_address) == ("0.0.0.0", "0.0.0.0")
