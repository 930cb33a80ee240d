"""Magnetar's Avro compatibility check against Avro's own Java implementation (1.11.4, the version
Pulsar 4.0 uses, called as Pulsar's broker calls it): the recorded table of tests/broker/avro_cases.py,
then a few hundred generated schema pairs compared answer for answer.

The Java side is tests/resources/avro_oracle/AvroOracle.java, built by its build.sh against Avro from
Maven Central into a cache outside the repository (``MAGNETAR_ORACLE_CACHE``, else
``~/.cache/magnetar/avro-oracle``). Without java, javac or mvn, or when Maven Central cannot be
reached, the tests are skipped with that reason."""

from __future__ import annotations

import json
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.schema._avro_compat import AvroSchemaError, default_error, parse_avro, read_error

from .avro_cases import PARSES, READS

_BUILD = Path(__file__).resolve().parents[1] / "resources" / "avro_oracle" / "build.sh"
_SKIP_REASONS = {
    3: "Maven Central could not be reached to fetch org.apache.avro:avro",
    4: "java, javac or mvn is not installed",
}


@pytest.fixture(scope="module")
def oracle() -> Iterator[Any]:
    """A function: list of questions -> list of answers from Avro's Java implementation."""
    try:
        built = subprocess.run(["bash", str(_BUILD)], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.skip("fetching Avro from Maven Central took over 10 minutes")
    if built.returncode in _SKIP_REASONS:
        pytest.skip(f"{_SKIP_REASONS[built.returncode]}: {built.stderr[-500:]}")
    assert built.returncode == 0, built.stderr[-3000:]
    command = built.stdout.split("\n")[:4]

    def ask(questions: list[dict[str, str]]) -> list[dict[str, str]]:
        ran = subprocess.run(command, input=json.dumps(questions), capture_output=True, text=True, timeout=300)
        assert ran.returncode == 0, ran.stderr[-3000:]
        answers: list[dict[str, str]] = json.loads(ran.stdout)
        assert len(answers) == len(questions)
        return answers

    yield ask


def _python_reads(reader: Any, writer: Any) -> bool:
    return read_error(parse_avro(json.dumps(reader)), parse_avro(json.dumps(writer))) is None


def _python_parses(schema: Any) -> tuple[bool, bool]:
    try:
        node = parse_avro(json.dumps(schema))
    except AvroSchemaError:
        return False, False
    return True, default_error(node) is None


def test_recorded_table_is_avros(oracle: Any) -> None:
    questions = [{"op": "can_read", "reader": json.dumps(r), "writer": json.dumps(w)} for _, r, w, _ in READS]
    for _, schema, _, _ in PARSES:
        questions += [
            {"op": "parse", "schema": json.dumps(schema)},
            {"op": "parse_defaults", "schema": json.dumps(schema)},
        ]
    answers = iter(oracle(questions))
    wrong = [case for case, *_r, expected in READS if (next(answers)["result"] == "ok") != expected]
    for case, _, valid, valid_defaults in PARSES:
        java = (next(answers)["result"] == "ok", next(answers)["result"] == "ok")
        if java != (valid, valid_defaults):
            wrong.append(f"{case}: Java says {java}")
    assert not wrong, f"cases whose recorded answer is not Avro's: {wrong}"


# ------------------------------------------------------------------ generated pairs


class _Gen:
    """Generates a schema; a second generator with the same seed and a ``vary`` probability makes
    a related schema: every choice is drawn as for the first, then redrawn with that probability,
    so the pair differs in a few places (names, fields, defaults, aliases, symbols, types)."""

    NAMES = ("A", "B", "C")
    NAMESPACES = (None, None, "x", "y")
    FIELDS = ("a", "b", "c", "d")
    PRIMS = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")

    def __init__(self, seed: int, vary: float) -> None:
        self.base = random.Random(seed)
        self.alt = random.Random(seed * 7919 + 1)
        self.vary = vary
        self.defined: set[str] = set()

    def pick(self, options: Any) -> Any:
        chosen = self.base.choice(options)
        if self.vary and self.alt.random() < self.vary:
            return self.alt.choice(options)
        return chosen

    def chance(self, p: float) -> bool:
        return bool(self.pick([True] * int(p * 20) + [False] * (20 - int(p * 20))))

    def named(self, kind: str) -> tuple[dict[str, Any] | str, str]:
        name, ns = self.pick(self.NAMES), self.pick(self.NAMESPACES)
        full = f"{ns}.{name}" if ns else name
        if full in self.defined:
            return full, full  # a reference to the type defined earlier (possibly itself)
        self.defined.add(full)
        out: dict[str, Any] = {"type": kind, "name": name}
        if ns:
            out["namespace"] = ns
        if self.chance(0.15):
            out["aliases"] = [self.pick(self.NAMES)]
        return out, full

    def type(self, depth: int, direct: bool = False) -> Any:
        """A type; ``direct`` for a field's own type, where a reference to a record defined
        earlier goes into a nullable union (a record holding itself directly can have no value,
        and Magnetar refuses it)."""
        out = self._type(depth)
        return ["null", out] if direct and isinstance(out, str) and out not in self.PRIMS else out

    def _type(self, depth: int) -> Any:
        kinds = ["prim"] * 4 + ["enum", "fixed", "array", "map", "nullable", "union"] + ["record"] * (3 if depth else 0)
        kind = self.pick(kinds)
        if kind == "prim" or depth > 3:
            return self.pick(self.PRIMS)
        if kind == "enum":
            out, _ = self.named("enum")
            if isinstance(out, dict):
                out["symbols"] = [s for s in ("X", "Y", "Z") if self.chance(0.7)] or ["X"]
                if self.chance(0.2):
                    out["default"] = out["symbols"][0]
            return out
        if kind == "fixed":
            out, _ = self.named("fixed")
            if isinstance(out, dict):
                out["size"] = self.pick([2, 4])
            return out
        if kind == "array":
            return {"type": "array", "items": self.type(depth + 1)}
        if kind == "map":
            return {"type": "map", "values": self.type(depth + 1)}
        if kind in ("nullable", "union"):
            branches = (
                ["null", self.type(depth + 1)]
                if kind == "nullable"
                else [self.type(depth + 1) for _ in range(self.pick([2, 3]))]
            )
            if self.chance(0.3):
                branches.reverse()
            return self._distinct(branches) or "null"
        return self.record(depth)

    @staticmethod
    def _distinct(branches: list[Any]) -> list[Any]:
        out, keys = [], set()
        for b in branches:
            if isinstance(b, list):
                continue
            key = b if isinstance(b, str) else b.get("name", b["type"])
            if isinstance(b, dict) and "namespace" in b:
                key = f"{b['namespace']}.{key}"
            if key not in keys:
                keys.add(key)
                out.append(b)
        return out

    def record(self, depth: int) -> Any:
        out, _ = self.named("record")
        if not isinstance(out, dict):
            return out
        fields = []
        for name in self.FIELDS:
            if not self.chance(0.6):
                continue
            ftype = self.type(depth + 1, direct=True)
            f: dict[str, Any] = {"name": name, "type": ftype}
            if self.chance(0.35):
                f["default"] = self.default(ftype) if self.chance(0.8) else self.pick(["x", None, 1.5, 7, [], {}])
            if self.chance(0.15):
                f["aliases"] = [self.pick(self.FIELDS)]
            fields.append(f)
        out["fields"] = fields
        return out

    def default(self, ftype: Any) -> Any:
        if isinstance(ftype, list):
            return self.default(ftype[0])
        kind = ftype if isinstance(ftype, str) else ftype["type"]
        if kind in ("int", "long"):
            return 3
        if kind in ("float", "double"):
            return 0.5
        if kind in ("string", "bytes"):
            return "s"
        if kind == "fixed":
            return "ab"
        if kind == "boolean":
            return True
        if kind == "enum":
            return ftype["symbols"][0]
        if kind == "array":
            return []
        if kind in ("map", "record"):
            return {}
        return None  # null, or a reference to a named type


def _pairs(count: int) -> list[tuple[Any, Any]]:
    pairs = []
    for seed in range(count):
        first = _Gen(seed, 0.0).record(0)
        second = _Gen(seed, random.Random(seed).choice([0.05, 0.1, 0.2])).record(0)
        pairs.append((first, second))
    return pairs


def test_generated_pairs_agree_with_avro(oracle: Any) -> None:
    pairs = _pairs(400)
    questions = []
    for a, b in pairs:
        questions += [
            {"op": "parse", "schema": json.dumps(a)},
            {"op": "parse_defaults", "schema": json.dumps(a)},
            {"op": "parse", "schema": json.dumps(b)},
            {"op": "can_read", "reader": json.dumps(a), "writer": json.dumps(b)},
            {"op": "can_read", "reader": json.dumps(b), "writer": json.dumps(a)},
        ]
    answers = iter(oracle(questions))
    disagreements, checked, readable = [], 0, 0
    for a, b in pairs:
        parse_a, defaults_a, parse_b, a_reads_b, b_reads_a = (next(answers) for _ in range(5))
        java_a = (parse_a["result"] == "ok", defaults_a["result"] == "ok")
        if java_a != _python_parses(a):
            disagreements.append(("parse", a, java_a, parse_a))
        if parse_b["result"] != "ok" or not java_a[0]:
            continue
        for (reader, writer), answer in (((a, b), a_reads_b), ((b, a), b_reads_a)):
            checked += 1
            java = answer["result"] == "ok"
            readable += java
            if java != _python_reads(reader, writer):
                disagreements.append(("reads", reader, writer, answer))
    assert not disagreements, json.dumps(disagreements[:5], indent=1)
    # the pairs are not trivially all one way
    assert checked > 500 and 0.2 * checked < readable < 0.9 * checked, (checked, readable)
