"""Regenerating every committed ``*_pb2.py`` from its ``.proto`` changes nothing (all protos)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_protobuf_modules_are_up_to_date() -> None:
    python = ROOT / ".venv" / "bin" / "python"
    exe = str(python) if python.exists() else sys.executable
    proc = subprocess.run(
        [exe, str(ROOT / "scripts" / "gen_protos.py"), "--check"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
