"""The config loader: every bad key or value stops start-up with a message naming the key."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from magnetar.common.config import (
    ConfigError,
    config_field,
    describe,
    key_names,
    load_config,
    parse_overrides,
    parse_properties,
    read_properties,
    read_toml,
    require_at_least,
    require_fraction,
    require_positive,
)


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
        ({"dirs": 1}, None, "dirs"),
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


@dataclass(frozen=True)
class Limits:
    size: int = config_field(1, alias="sizeBytes")
    wait_s: float = config_field(0.5)
    backups: int = config_field(0)
    quota: int = config_field(-1)
    ratio: float = config_field(0.0, alias="someThreshold")


def _reason(call) -> tuple[str, str]:
    with pytest.raises(ConfigError) as info:
        call()
    return info.value.key, info.value.reason


def test_require_positive_names_the_first_bad_key_in_order() -> None:
    require_positive(Limits(), "size", "wait_s")
    assert _reason(lambda: require_positive(Limits(size=0, wait_s=0.0), "wait_s", "size")) == (
        "wait_s",
        "must be positive",
    )
    assert _reason(
        lambda: require_positive(Limits(size=-3), "wait_s", "size", message="{key} [{alias}] must be > 0, got {value}")
    ) == ("size", "size [sizeBytes] must be > 0, got -3")
    # a float just above zero is positive; a key without an alias formats its own name as {alias}
    require_positive(Limits(wait_s=1e-9), "wait_s")
    assert _reason(lambda: require_positive(Limits(wait_s=-1.0), "wait_s", message="{alias}")) == ("wait_s", "wait_s")


def test_require_at_least_defaults_and_minimum() -> None:
    require_at_least(Limits(), "backups", "size")
    assert _reason(lambda: require_at_least(Limits(backups=-1), "backups")) == ("backups", "must not be negative")
    require_at_least(Limits(), "quota", minimum=-1)
    assert _reason(lambda: require_at_least(Limits(quota=-2), "quota", minimum=-1)) == ("quota", "must be at least -1")
    assert _reason(lambda: require_at_least(Limits(size=0), "size", minimum=1, message="must be >= 1")) == (
        "size",
        "must be >= 1",
    )


def test_require_fraction_closed_and_half_open() -> None:
    require_fraction(Limits(), "ratio")
    require_fraction(Limits(ratio=1.0), "ratio", zero_ok=False)
    assert _reason(lambda: require_fraction(Limits(), "ratio", zero_ok=False)) == (
        "ratio",
        "must be a fraction in (0, 1], got 0.0",
    )
    assert _reason(lambda: require_fraction(Limits(ratio=1.5), "ratio")) == (
        "ratio",
        "must be a fraction in [0, 1], got 1.5",
    )
    assert _reason(
        lambda: require_fraction(Limits(ratio=-0.1), "ratio", message="{alias} must be in [0, 1], got {value}")
    ) == ("ratio", "someThreshold must be in [0, 1], got -0.1")


def test_require_helpers_inside_validate_get_the_section_prefix() -> None:
    @dataclass(frozen=True)
    class Checked(Limits):
        def validate(self) -> None:
            require_positive(self, "size")

    with pytest.raises(ConfigError) as info:
        load_config(Checked, {"sizeBytes": 0}, section="bookie")
    assert info.value.key == "bookie.size"


# ------------------------------------------------------------------ values as Pulsar writes them


def test_list_keys_take_a_comma_separated_string_in_toml_as_in_pulsar() -> None:
    assert load_config(Sample, {"dirs": "admin,ops"}).dirs == ("admin", "ops")
    assert load_config(Sample, {"dirs": " admin , ops ,"}).dirs == ("admin", "ops")
    assert load_config(Sample, {"dirs": ["admin", "ops"]}).dirs == ("admin", "ops")
    assert load_config(Sample, {"dirs": ""}).dirs == ()


def test_strings_are_parsed_as_pulsar_and_bookkeeper_spell_them() -> None:
    cfg = load_config(Sample, None, {"port": "010", "journalSyncData": "TRUE", "dirs": "a,b"})
    assert (cfg.port, cfg.sync, cfg.dirs) == (10, True, ("a", "b"))  # Integer.valueOf("010") is 10
    assert load_config(Sample, None, {"port": "0x10"}).port == 16
    for spelling, value in (("false", False), ("off", False), ("no", False), ("on", True), ("Yes", True)):
        assert load_config(Sample, None, {"journalSyncData": spelling}).sync is value
    with pytest.raises(ConfigError, match="true or false"):
        load_config(Sample, None, {"journalSyncData": "maybe"})


def test_properties_blank_values_mean_what_they_mean_to_pulsar() -> None:
    # blank: a list key gets no items, an optional key no value, any other key keeps its value
    cfg = load_config(Sample, {"port": 7, "limit": 3}, properties={"port": "", "dirs": "", "limit": "", "name": " "})
    assert (cfg.port, cfg.dirs, cfg.limit, cfg.name) == (7, (), None, "x")
    cfg = load_config(Sample, None, {"port": "9"}, properties={"port": "8", "minorCompactionThreshold": "0.5"})
    assert (cfg.port, cfg.ratio) == (9, 0.5)  # overrides win over the file
    with pytest.raises(ConfigError, match=r"'bookie\.port'.*integer"):
        load_config(Sample, properties={"port": "many"}, section="bookie")


def test_key_names_lists_both_spellings() -> None:
    names = key_names(Sample)
    assert names["journalSyncData"] == "sync" and names["sync"] == "sync" and names["port"] == "port"


def test_parse_properties_follows_java_properties_syntax() -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "\n"
        "plain=value\n"
        "  spaced   =   padded value   \n"
        "colon: v\n"
        "blank=\n"
        "whitespace separated\n"
        "list=a,\\\n"
        "     b,\\\n"
        "     c\n"
        "escaped\\=key=x\\ty\\u0041\n"
        'json={"a":"/p/x.pem","b":1}\n'
        "twice=1\n"
        "twice=2\n"
        "#commented=out\n"
        "url=https://host:8443/path\n"
    )
    assert parse_properties(text) == {
        "plain": "value",
        "spaced": "padded value",
        "colon": "v",
        "blank": "",
        "whitespace": "separated",
        "list": "a,b,c",
        "escaped=key": "x\tyA",
        "json": '{"a":"/p/x.pem","b":1}',
        "twice": "2",
        "url": "https://host:8443/path",
    }


def test_read_properties_missing_file_and_latin1(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        read_properties(tmp_path / "missing.conf")
    f = tmp_path / "latin1.conf"
    f.write_bytes("clusterName=caf\xe9\n".encode("latin-1"))
    assert read_properties(f) == {"clusterName": "café"}
