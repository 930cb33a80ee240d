"""The part of every ``scripts/gen_*.py`` that writes generated files or, with ``--check``, only
compares them: a generator says what the files should hold, this decides what to do with it.

The generated files are committed, and a test runs each generator with ``--check`` so they cannot
drift from their sources.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_or_check(generated: Mapping[str, bytes], *, check: bool, stale_title: str, root: Path = ROOT) -> int:
    """Compare each ``generated`` file (by path relative to ``root``) with the one on disk.

    Without ``check``, rewrite the differing or missing ones, print ``wrote <path>`` for each and
    return 0. With ``check``, write nothing; when any differs print ``stale_title`` and the paths
    and return 1 (the exit status), else return 0.
    """
    stale = []
    for rel, new in generated.items():
        target = root / rel
        if target.exists() and target.read_bytes() == new:
            continue
        stale.append(str(rel))
        if not check:
            target.write_bytes(new)
    if check and stale:
        print(stale_title, *stale, sep="\n  ")
        return 1
    for rel in stale:
        print("wrote", rel)
    return 0


def main(doc: str, generate: Callable[[], Mapping[str, bytes]], stale_title: str) -> int:
    """Parse ``[--check]`` (the usage text is the first line of ``doc``), call ``generate`` and
    `write_or_check` its files; return the exit status."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    opts = parser.parse_args()
    return write_or_check(generate(), check=opts.check, stale_title=stale_title)
