#!/usr/bin/env python3
"""Regenerate the committed ``*_pb2.py`` modules (and their ``.pyi`` type stubs, which mypy reads)
from the ``.proto`` files.

    python scripts/gen_protos.py          # rewrite the generated modules
    python scripts/gen_protos.py --check  # exit 1 and name the files whose generated code differs

The generator is grpcio-tools at the exact version pinned in pyproject's ``test`` extra, so
regeneration is reproducible. Generated modules are committed (not built at install) so that a
plain ``pip install`` needs no protoc. Protos import each other by repository-relative path
(``import "protocols/bookkeeper/ledger_metadata.proto";``), which makes the generated imports
``from protocols.bookkeeper import ledger_metadata_pb2``. Every .proto lives under ``protocols/``.
"""

from __future__ import annotations

import keyword
import re
import sys
import tempfile
from pathlib import Path

from _regen import main as regen_main  # scripts/ is sys.path[0] when a script runs

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("protocols",)


def proto_files() -> list[Path]:
    """Every .proto file in the Magnetar packages, repository-relative, sorted."""
    found: list[Path] = []
    for pkg in PACKAGES:
        found.extend(p.relative_to(ROOT) for p in (ROOT / pkg).rglob("*.proto"))
    return sorted(found)


def generate(out_dir: Path) -> list[Path]:
    """Run protoc on every proto into ``out_dir``; return the generated files (relative)."""
    from grpc_tools import protoc  # imported here: only needed by developers and the test

    files = proto_files()
    if not files:
        return []
    args = ["protoc", f"--proto_path={ROOT}", f"--python_out={out_dir}", f"--pyi_out={out_dir}", *map(str, files)]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    return [f.with_name(f.stem + suffix) for f in files for suffix in ("_pb2.py", "_pb2.pyi")]


_KEYWORD_ATTR = re.compile(rb"^(\s*)(" + b"|".join(k.encode() for k in keyword.kwlist) + rb")(: .*)$", re.M)


def _fix_stub(text: bytes) -> bytes:
    # Pulsar's Schema.Type has a value named None: protoc writes "None: ..." into the stub, which
    # is not valid Python; the value is reachable only by number or Value("None") anyway.
    return _KEYWORD_ATTR.sub(rb"\1# \2\3  (a Python keyword: not an attribute)", text)


def generated_files() -> dict[str, bytes]:
    """What every ``*_pb2.py`` module and ``.pyi`` stub should hold, by path relative to the repository."""
    with tempfile.TemporaryDirectory() as tmp:
        out = {str(rel): (Path(tmp) / rel).read_bytes() for rel in generate(Path(tmp))}
    return {rel: _fix_stub(data) if rel.endswith(".pyi") else data for rel, data in out.items()}


def main() -> int:
    return regen_main(__doc__, generated_files, "generated code is out of date:")


if __name__ == "__main__":
    sys.exit(main())
