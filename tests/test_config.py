"""The config loader: every bad key or value stops start-up with a message naming the key."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from magnetar.config import ConfigError, config_field, describe, load_config, parse_overrides, read_toml


@dataclass(frozen=True)
class Sample:
    port: int = config_field(3181, help="port")
    ratio: float = config_field(0.2, alias="minorCompactionThreshold")
    major: float = config_field(0.8)
    name: str = config_field("x")
    sync: bool = config_field(True, alias="journalSyncData")
    dirs: tuple[str, ...] = config_field(["a"])
    data: Path = config_field(Path("data"))
    limit: int | None = config_field(None)

    def validate(self) -> None:
        if not self.ratio < self.major:
            raise ConfigError("ratio", f"must be below major ({self.major})")


def test_defaults_and_types() -> None:
    cfg = load_config(Sample)
    assert cfg == Sample()
    assert cfg.dirs == ("a",)


def test_table_with_alias_and_overrides_win() -> None:
    cfg = load_config(Sample, {"port": 1, "minorCompactionThreshold": 0.1}, {"port": "2", "dirs": "x, y"})
    assert (cfg.port, cfg.ratio, cfg.dirs) == (2, 0.1, ("x", "y"))


def test_override_parsing_of_each_type() -> None:
    cfg = load_config(Sample, None, {"journalSyncData": "false", "data": "/tmp/d", "limit": "10", "ratio": "0.5"})
    assert cfg.sync is False and cfg.data == Path("/tmp/d") and cfg.limit == 10 and cfg.ratio == 0.5
    assert load_config(Sample, None, {"limit": ""}).limit is None


@pytest.mark.parametrize(
    ("table", "overrides", "key"),
    [
        ({"prot": 1}, None, "prot"),
        ({"port": "3181"}, None, "port"),
        ({"port": True}, None, "port"),
        ({"sync": "yes"}, None, "sync"),
        ({"dirs": "a"}, None, "dirs"),
        (None, {"port": "abc"}, "port"),
        (None, {"ratio": "x"}, "ratio"),
        ({"ratio": 0.9}, None, "ratio"),
        ({"ratio": 0.1, "minorCompactionThreshold": 0.1}, None, "minorCompactionThreshold"),
    ],
)
def test_bad_input_names_the_key(table, overrides, key) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(Sample, table, overrides, section="bookie")
    assert info.value.key == f"bookie.{key}"
    assert f"bookie.{key}" in str(info.value)


def test_read_toml_sections_and_errors(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text("[bookie]\nport = 1\n")
    assert read_toml(good, "bookie") == {"port": 1}
    assert read_toml(good, "broker") == {}
    bad = tmp_path / "bad.toml"
    bad.write_text("port = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        read_toml(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        read_toml(tmp_path / "missing.toml")


def test_parse_overrides() -> None:
    assert parse_overrides(["a=1", "b = x=y"]) == {"a": "1", "b": " x=y"}
    with pytest.raises(ConfigError):
        parse_overrides(["novalue"])


def test_describe_lists_aliases_and_defaults() -> None:
    rows = {name: (alias, default) for name, alias, default, _ in describe(Sample)}
    assert rows["ratio"] == ("minorCompactionThreshold", 0.2)
    assert rows["dirs"] == (None, ("a",))
