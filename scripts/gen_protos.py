#!/usr/bin/env python3
"""Regenerate the committed ``*_pb2.py`` modules from the ``.proto`` files.

    python scripts/gen_protos.py          # rewrite the generated modules
    python scripts/gen_protos.py --check  # exit 1 and name the files whose generated code differs

The generator is grpcio-tools at the exact version pinned in pyproject's ``test`` extra, so
regeneration is reproducible. Generated modules are committed (not built at install) so that a
plain ``pip install`` needs no protoc. Protos import each other by repository-relative path
(``import "bookie/protocol/ledger_metadata.proto";``), which makes the generated imports
``from bookie.protocol import ledger_metadata_pb2``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("broker", "managed_ledger", "bookie", "bk_client", "metadata", "retention", "sinks")


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
    args = ["protoc", f"--proto_path={ROOT}", f"--python_out={out_dir}", *map(str, files)]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    return [f.with_name(f.stem + "_pb2.py") for f in files]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        generated = generate(Path(tmp))
        stale = []
        for rel in generated:
            new = (Path(tmp) / rel).read_bytes()
            target = ROOT / rel
            if target.exists() and target.read_bytes() == new:
                continue
            stale.append(str(rel))
            if not opts.check:
                target.write_bytes(new)
    if opts.check and stale:
        print("generated code is out of date:", *stale, sep="\n  ")
        return 1
    for rel in stale:
        print("wrote", rel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
