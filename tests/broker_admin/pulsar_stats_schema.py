"""Checks a stats JSON document against Pulsar 4.0's field list (``pulsar4_stats_fields.json``).

`problems(doc, "TopicStatsImpl")` walks ``doc`` as the named class: every field Pulsar always
writes must be there, nothing Pulsar does not write may be (save a class's declared Magnetar
extras), and each value must have the JSON type of its Java type, nested classes included.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["FIELDS_FILE", "schema", "fields_of", "problems"]

FIELDS_FILE = Path(__file__).parent / "pulsar4_stats_fields.json"


@cache
def schema() -> dict[str, Any]:
    """The parsed field list."""
    return json.loads(FIELDS_FILE.read_text())


def fields_of(cls: str) -> tuple[dict[str, str], set[str], dict[str, str]]:
    """(field -> Java type, nullable fields, Magnetar extras) of ``cls``, inherited ones included."""
    spec = schema()["classes"][cls]
    fields: dict[str, str] = {}
    nullable: set[str] = set()
    extras: dict[str, str] = {}
    parent = spec.get("extends")
    if parent:
        fields, nullable, extras = fields_of(parent)
        fields, nullable, extras = dict(fields), set(nullable), dict(extras)
    fields.update(spec["fields"])
    nullable.update(spec.get("nullable", ()))
    extras.update(spec.get("magnetar_extras", {}))
    return fields, nullable, extras


_GENERIC = re.compile(r"^(List|Map)<(.*)>$")


def _check_value(value: Any, java: str, path: str, out: list[str]) -> None:
    if value is None:
        out.append(f"{path}: null (Pulsar leaves null values out)")
        return
    generic = _GENERIC.match(java)
    if generic:
        kind, inner = generic.groups()
        if kind == "List":
            if not isinstance(value, list):
                out.append(f"{path}: {type(value).__name__}, not a list")
                return
            for i, item in enumerate(value):
                _check_value(item, inner, f"{path}[{i}]", out)
        else:
            key_type, _, value_type = inner.partition(",")
            assert key_type == "String", java
            if not isinstance(value, dict):
                out.append(f"{path}: {type(value).__name__}, not an object")
                return
            for key, item in value.items():
                _check_value(item, value_type, f"{path}.{key}", out)
        return
    if java == "double":
        ok = type(value) is float
    elif java in ("long", "int", "Long"):
        ok = type(value) is int and -(1 << 63) <= value < (1 << 63)
        if ok and java == "int":
            ok = -(1 << 31) <= value < (1 << 31)
    elif java == "boolean":
        ok = type(value) is bool
    elif java == "String":
        ok = type(value) is str
    elif java in schema()["classes"]:
        if isinstance(value, dict):
            out.extend(problems(value, java, path))
            return
        ok = False
    else:
        out.append(f"{path}: type {java} is not described in {FIELDS_FILE.name}")
        return
    if not ok:
        out.append(f"{path}: {value!r} is not a JSON value of Java type {java}")


def problems(doc: Any, cls: str, path: str = "$") -> list[str]:
    """What in ``doc`` does not match Pulsar's ``cls`` (empty when it matches)."""
    if not isinstance(doc, dict):
        return [f"{path}: {type(doc).__name__}, not an object of {cls}"]
    fields, nullable, extras = fields_of(cls)
    out: list[str] = []
    for name in fields:
        if name not in doc and name not in nullable:
            out.append(f"{path}.{name}: missing ({cls} always has it)")
    for name, value in doc.items():
        java = fields.get(name) or extras.get(name)
        if java is None:
            out.append(f"{path}.{name}: not a field of Pulsar's {cls}")
            continue
        _check_value(value, java, f"{path}.{name}", out)
    return out
