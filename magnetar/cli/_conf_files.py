"""``--conf`` files: Magnetar's TOML, or a Java-properties file as Pulsar and BookKeeper ship them.

A properties file (Pulsar's ``broker.conf`` / ``standalone.conf``, BookKeeper's ``bk_server.conf``,
as users edit them) has no tables: each of its keys goes to every table of the command whose
config class accepts that spelling (``advertisedAddress`` to both ``[broker]`` and ``[bookie]`` of
a standalone). Rules:

* Rule 1 (which format): a file named ``*.toml`` is TOML, one named ``*.conf`` or
  ``*.properties`` a properties file; any other name is TOML if it parses as TOML, else properties.
* Rule 2 (keys Magnetar implements): applied, with the values parsed as Pulsar parses them
  (`magnetar.common.config.load_config`'s ``properties``: blank = empty list, unset, or unchanged).
  ``bookkeeper_<key>`` (Pulsar's pass-through to its BookKeeper client) applies ``<key>`` to the
  ``[bk_client]`` table. Where a key's value means something else to BookKeeper than to Magnetar's
  field of the same alias, it is translated (`_TRANSLATIONS`).
* Rule 3 (keys Pulsar 4.0 or BookKeeper 4.17 define that this command does not implement, and
  keys earlier Pulsar releases defined, which Pulsar 4.0 still reads without complaint): ignored,
  and named, all of them in one start-up warning (`unimplemented_warning`). The lists of those
  keys are data (``known_keys/*.txt``: names only, from the projects' configuration classes and
  shipped files).
* Rule 4 (keys nobody defines): a `ConfigError` naming the key stops start-up, as an unknown TOML
  key does.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from magnetar.common.config import ConfigError, key_names, read_properties, read_toml

__all__ = ["ConfFile", "read_conf", "route_properties", "known_foreign_keys", "unimplemented_warning"]

BOOKKEEPER_PASS_THROUGH = "bookkeeper_"
"""Pulsar hands keys with this prefix, the prefix removed, to its BookKeeper client."""


@dataclass(frozen=True)
class ConfFile:
    """A ``--conf`` file read: TOML tables, or the key/value strings of a properties file."""

    path: Path
    toml: dict[str, Any] = field(default_factory=dict)
    properties: dict[str, str] | None = None

    @property
    def is_properties(self) -> bool:
        """Whether the file is a Java-properties file (Rule 1)."""
        return self.properties is not None


def read_conf(path: Path) -> ConfFile:
    """Read ``path`` as TOML or as a properties file (Rule 1); `ConfigError` names ``--conf``."""
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return ConfFile(path, toml=read_toml(path))
    if suffix in (".conf", ".properties"):
        return ConfFile(path, properties=read_properties(path))
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("--conf", f"file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError):
        return ConfFile(path, properties=read_properties(path))
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return ConfFile(path, properties=read_properties(path))
    return ConfFile(path, toml=read_toml(path))


@functools.cache
def known_foreign_keys() -> dict[str, frozenset[str]]:
    """The keys Pulsar 4.0 (``"pulsar"``), earlier Pulsar releases only (``"pulsar-retired"``) and
    BookKeeper 4.17 (``"bookkeeper"``) define (Rule 3)."""
    folder = resources.files("magnetar.cli").joinpath("known_keys")
    out = {}
    for name, filename in (
        ("pulsar", "pulsar-4.0.txt"),
        ("pulsar-retired", "pulsar-retired.txt"),
        ("bookkeeper", "bookkeeper-4.17.txt"),
    ):
        text = folder.joinpath(filename).read_text(encoding="utf-8")
        out[name] = frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))
    return out


def _defined_elsewhere(key: str) -> bool:
    known = known_foreign_keys()
    if any(key in keys for keys in known.values()):
        return True
    return key.startswith(BOOKKEEPER_PASS_THROUGH) and key[len(BOOKKEEPER_PASS_THROUGH) :] in known["bookkeeper"]


def _ledgers_root(value: str) -> str:
    """BookKeeper's ``zkLedgersRootPath`` is the ledgers node itself (``/ledgers``); Magnetar's root
    is the node that holds ``ledgers`` (``""`` for ``/ledgers``)."""
    path = value.strip().rstrip("/")
    if not path:
        return ""
    if path != "/ledgers" and not path.endswith("/ledgers"):
        raise ConfigError(
            "zkLedgersRootPath",
            f"{value!r}: Magnetar keeps a cluster's ledgers in a node named ledgers (/ledgers, or /<root>/ledgers)",
        )
    return path[: -len("/ledgers")]


_TRANSLATIONS: dict[str, Callable[[str], str]] = {"zkLedgersRootPath": _ledgers_root}
"""Rule 2: keys whose value BookKeeper reads differently from the Magnetar field of that alias."""


def route_properties(
    properties: Mapping[str, str], sections: Mapping[str, type]
) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Split a properties file's keys over the tables of a command (Rules 2 - 4).

    Returns the properties each table takes (by table name) and the keys Pulsar or BookKeeper
    define that no table takes, sorted. Raises `ConfigError` naming the first key that nobody
    defines.
    """
    accepted = {name: key_names(cls) for name, cls in sections.items()}
    tables: dict[str, dict[str, str]] = {name: {} for name in sections}
    unimplemented: list[str] = []
    for key, value in properties.items():
        targets = [name for name, names in accepted.items() if key in names]
        own_key = key
        if not targets and key.startswith(BOOKKEEPER_PASS_THROUGH) and "bk_client" in accepted:
            own_key = key[len(BOOKKEEPER_PASS_THROUGH) :]
            targets = ["bk_client"] if own_key in accepted["bk_client"] else []
        if targets:
            translate = _TRANSLATIONS.get(own_key)
            for name in targets:
                tables[name][own_key] = translate(value) if translate is not None else value
        elif _defined_elsewhere(key):
            unimplemented.append(key)
        else:
            raise ConfigError(
                key, f"not a configuration key of Magnetar ({', '.join(sections)}), Pulsar or BookKeeper 4.17"
            )
    return tables, sorted(unimplemented)


def unimplemented_warning(command: str, path: Path, keys: list[str]) -> str:
    """The one start-up warning naming every key of ``path`` that ``command`` ignores (Rule 3)."""
    return (
        f"magnetar {command}: {len(keys)} key(s) of {path} are defined by Pulsar or BookKeeper but not "
        f"implemented by Magnetar's {command}, and are ignored: {', '.join(keys)}"
    )
