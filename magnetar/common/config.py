"""Load frozen-dataclass configs from TOML files and command-line overrides.

Every Magnetar component describes its settings as a frozen dataclass. This module turns a TOML
table plus ``key=value`` overrides into an instance of such a class, and refuses, with a
`ConfigError` naming the offending key, anything it cannot turn into exactly the declared type.

Rules:

* A TOML key is the dataclass field name (``journal_max_size_mb``). A field may also declare the
  BookKeeper / Pulsar spelling in its metadata (``field(metadata={"alias": "journalMaxSizeMB"})``);
  both spellings are accepted, giving both at once is an error.
* Unknown keys are errors, never ignored: a typo must not silently leave a default in force.
* Types are checked, not coerced from TOML (``port = "3181"`` is an error), with one exception: a
  list key also takes Pulsar's comma-separated string (``superUserRoles = "admin,ops"``). Overrides
  from the command line and values from a Java-properties file arrive as strings and are parsed for
  the field's type as Pulsar and BookKeeper parse them: integers in decimal (or ``0x`` hex),
  booleans ``true``/``false`` (also ``yes``/``no``, ``on``/``off``, ``1``/``0``, any case), lists
  comma-separated.
* Java-properties files (Pulsar's ``broker.conf`` / ``standalone.conf``, BookKeeper's
  ``bk_server.conf``) are read by `read_properties` with ``java.util.Properties``' syntax. A blank
  value there means what it means to Pulsar: an empty list for a list key, "not set" for an
  optional key, and no change for every other key (`load_config`'s ``properties``).
* After construction the class's own ``validate()`` (if any) runs; it raises `ConfigError` for rules
  that involve several keys (for example a minor compaction threshold above the major one).
  `require_positive`, `require_at_least` and `require_fraction` state the common single-key rules
  ("these keys must be > 0 / >= n / a fraction") once, for every ``validate()`` to use.

This module imports nothing from the rest of Magnetar so that every package may use it.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "ConfigError",
    "config_field",
    "describe",
    "key_names",
    "load_config",
    "parse_overrides",
    "parse_properties",
    "parse_value",
    "read_properties",
    "read_toml",
    "require_at_least",
    "require_fraction",
    "require_positive",
]

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value is missing, unknown or invalid.

    ``key`` names the offending key (dotted with its section when there is one) so that the
    message a user sees always says which line of their config to fix.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"config key {key!r}: {message}")
        self.key = key
        self.reason = message


def config_field(default: Any, *, alias: str | None = None, help: str = "") -> Any:
    """Declare a config field with a default, an optional BookKeeper/Pulsar alias and help text."""
    meta = {"help": help}
    if alias:
        meta["alias"] = alias
    if isinstance(default, (list, dict, set)):
        frozen = tuple(default) if isinstance(default, (list, set)) else default
        return dataclasses.field(default_factory=lambda: frozen, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _require(config: object, keys: typing.Iterable[str], ok: typing.Callable[[Any], bool], message: str) -> None:
    fields = {f.name: f for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else {}
    for key in keys:
        value = getattr(config, key)
        if not ok(value):
            f = fields.get(key)
            alias = (f.metadata.get("alias") if f is not None else None) or key
            raise ConfigError(key, message.format(key=key, alias=alias, value=value))


def require_positive(config: object, *keys: str, message: str = "must be positive") -> None:
    """Raise ``ConfigError(key, message)`` for the first of ``keys`` whose value on ``config`` is not > 0.

    ``message`` may use ``{value}``, ``{key}`` and ``{alias}`` (the field's BookKeeper / Pulsar
    alias, or its name when it has none). Keys are checked in the order given, so the error names
    the first bad one; an unknown key raises `AttributeError` (a bug in the caller, not the config).
    """
    _require(config, keys, lambda v: v > 0, message)


def require_at_least(config: object, *keys: str, minimum: int = 0, message: str | None = None) -> None:
    """Raise ``ConfigError(key, message)`` for the first of ``keys`` whose value is below ``minimum``.

    The default message is "must not be negative" for ``minimum=0`` and "must be at least
    {minimum}" otherwise; ``message`` may use the fields `require_positive` documents.
    """
    if message is None:
        message = "must not be negative" if minimum == 0 else f"must be at least {minimum}"
    _require(config, keys, lambda v: v >= minimum, message)


def require_fraction(config: object, *keys: str, zero_ok: bool = True, message: str | None = None) -> None:
    """Raise ``ConfigError(key, message)`` for the first of ``keys`` whose value is not a fraction:
    in [0, 1], or in (0, 1] when ``zero_ok`` is false.

    The default message is "must be a fraction in [0, 1], got {value}" (``(0, 1]`` when ``zero_ok``
    is false); ``message`` may use the fields `require_positive` documents.
    """
    if message is None:
        message = f"must be a fraction in {'[' if zero_ok else '('}0, 1], got {{value}}"
    if zero_ok:
        _require(config, keys, lambda v: 0.0 <= v <= 1.0, message)
    else:
        _require(config, keys, lambda v: 0.0 < v <= 1.0, message)


def read_toml(path: str | Path, section: str | None = None) -> dict[str, Any]:
    """Read a TOML file, optionally one table of it; raise `ConfigError` on syntax errors."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("--conf", f"file {str(p)!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("--conf", f"{p}: not valid TOML: {exc}") from None
    if section is None:
        return data
    table = data.get(section, {})
    if not isinstance(table, dict):
        raise ConfigError(section, "must be a table")
    return table


_PROPERTY_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> typing.Iterator[str]:
    """The logical lines of a properties text: comments and blank lines dropped, a line ending in
    an odd number of backslashes joined with the next (whose leading whitespace goes)."""
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f") if pending is not None else raw
        if pending is None and (not line.strip() or line.lstrip(" \t\f")[:1] in ("#", "!")):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = (pending or "") + line[:-1]
            continue
        yield (pending or "") + line
        pending = None
    if pending is not None:
        yield pending


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and len(text) >= i + 6:
            try:
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            except ValueError:
                pass
        out.append(_PROPERTY_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java-properties text as ``java.util.Properties.load`` does: ``#`` and ``!`` comment
    lines, ``key=value``, ``key: value`` or ``key value``, backslash line continuations and
    escapes (``\\t``, ``\\uXXXX``, ``\\=``...). Values are trimmed, as Pulsar and BookKeeper trim
    them; a key given twice keeps its last value, as in Java."""
    out: dict[str, str] = {}
    for line in _logical_lines(text):
        body = line.lstrip(" \t\f")
        end = 0
        while end < len(body) and body[end] not in "=: \t\f":
            end += 2 if body[end] == "\\" else 1
        key = body[:end]
        rest = body[end:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:]
        out[_unescape(key)] = _unescape(rest.strip(" \t\f"))
    return out


def read_properties(path: str | Path) -> dict[str, str]:
    """Read a Java-properties file (`parse_properties`), UTF-8 or else Latin-1 (Java's own
    encoding for properties files); a missing file raises `ConfigError` naming ``--conf``."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError("--conf", f"file {str(p)!r} does not exist") from None
    except OSError as exc:
        raise ConfigError("--conf", f"cannot read {str(p)!r}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return parse_properties(text)


def parse_overrides(pairs: typing.Iterable[str]) -> dict[str, str]:
    """Turn ``["key=value", ...]`` (from ``--set``) into a dict; malformed items raise `ConfigError`."""
    out: dict[str, str] = {}
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(item, "an override must look like key=value")
        out[key.strip()] = value
    return out


def _field_names(cls: type) -> dict[str, dataclasses.Field[Any]]:
    names: dict[str, dataclasses.Field[Any]] = {}
    for f in dataclasses.fields(cls):
        names[f.name] = f
        alias = f.metadata.get("alias")
        if alias:
            names[alias] = f
    return names


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


_BOOLEANS = {"true": True, "false": False, "yes": True, "no": False, "on": True, "off": False, "1": True, "0": False}


def _convert(key: str, tp: Any, value: Any, from_string: bool) -> Any:
    tp, optional = _unwrap_optional(tp)
    # An empty value for an optional key means "not set", as Pulsar's empty keys (brokerServicePort=):
    # from the command line for every type, in TOML for non-string types (where "" is no value).
    if value is None or (optional and value == "" and (from_string or tp is not str)):
        if optional:
            return None
        raise ConfigError(key, "must not be empty")
    origin = typing.get_origin(tp)
    if origin in (tuple, list):
        (item_tp, *_rest) = typing.get_args(tp) or (str,)
        if isinstance(value, str):
            # Pulsar's and BookKeeper's spelling of a list, also accepted in TOML
            value = [v for v in (s.strip() for s in value.split(",")) if v]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(key, f"must be a list, got {value!r}")
        return tuple(_convert(key, item_tp, v, from_string) for v in value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if from_string and isinstance(value, str) and value.strip().lower() in _BOOLEANS:
            return _BOOLEANS[value.strip().lower()]
        raise ConfigError(key, f"must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if from_string and isinstance(value, str):
            for base in (10, 0):  # decimal as Java's Integer.valueOf ("010" is 10), then 0x / 0o / 0b
                try:
                    return int(value.strip(), base)
                except ValueError:
                    pass
        raise ConfigError(key, f"must be an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if from_string and isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(key, f"must be a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(key, f"must be a string, got {value!r}")
    if tp is Path:
        if isinstance(value, str) and value:
            return Path(value)
        raise ConfigError(key, f"must be a path string, got {value!r}")
    raise ConfigError(key, f"unsupported config type {tp!r}")


def _blank_has_meaning(tp: Any) -> bool:
    """Whether a blank properties value sets a key of this type (an empty list, or "not set" for
    an optional key) rather than leaving it at its default."""
    tp, optional = _unwrap_optional(tp)
    return optional or typing.get_origin(tp) in (tuple, list)


def key_names(cls: type) -> dict[str, str]:
    """Every spelling a config class accepts (field names and their aliases) -> the field name."""
    return {key: f.name for key, f in _field_names(cls).items()}


def parse_value(cls: type, key: str, raw: str) -> Any:
    """``raw`` (a string, as on the command line or in a properties file) parsed for the field
    ``key`` (either spelling) of ``cls``, as `load_config` parses it; `ConfigError` names ``key``."""
    f = _field_names(cls).get(key)
    if f is None:
        raise ConfigError(key, f"unknown key for {cls.__name__}")
    return _convert(key, typing.get_type_hints(cls)[f.name], raw, True)


def load_config(
    cls: type[T],
    table: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    section: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> T:
    """Build ``cls`` from a TOML table, properties and overrides, validating every key.

    ``table`` values must already have the right TOML types; ``overrides`` values may be strings
    (from the command line), which are parsed for the field's type, or typed values (from click
    options), which are checked as TOML values are. ``properties`` are the string values of a
    Java-properties file (`read_properties`), parsed for the field's type, where a blank value
    gives a list key no items and an optional key no value, and leaves any other key as it is
    (Pulsar's reading of ``key=``). Keys in ``overrides`` win over ``properties``, which win over
    ``table``. The result's ``validate()`` method, if present, is called. Raises `ConfigError`
    naming the key (prefixed with ``section.`` when given) for any unknown, ill-typed or invalid
    value.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    prefix = f"{section}." if section else ""
    names = _field_names(cls)
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    sources: tuple[tuple[Mapping[str, Any], bool, bool], ...] = (
        (table or {}, False, False),
        (properties or {}, True, True),
        (overrides or {}, True, False),
    )
    for source, from_string, blank_is_default in sources:
        source_keys: dict[str, str] = {}
        for key, raw in source.items():
            f = names.get(key)
            if f is None:
                raise ConfigError(prefix + key, f"unknown key for {cls.__name__}")
            if f.name in source_keys:
                raise ConfigError(prefix + key, f"given twice (also as {source_keys[f.name]!r})")
            source_keys[f.name] = key
            if blank_is_default and isinstance(raw, str) and not raw.strip() and not _blank_has_meaning(hints[f.name]):
                continue
            is_string = from_string and isinstance(raw, str)
            values[f.name] = _convert(prefix + key, hints[f.name], raw, is_string)
    try:
        obj = cls(**values)
    except ConfigError as exc:
        raise ConfigError(prefix + exc.key, exc.reason) from None
    validate = getattr(obj, "validate", None)
    if callable(validate):
        try:
            validate()
        except ConfigError as exc:
            raise ConfigError(prefix + exc.key, exc.reason) from None
    return obj


def describe(cls: type) -> list[tuple[str, str | None, Any, str]]:
    """List ``(name, alias, default, help)`` for each field of a config class, for docs and CLIs."""
    rows = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        rows.append((f.name, f.metadata.get("alias"), default, f.metadata.get("help", "")))
    return rows
