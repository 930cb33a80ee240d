"""A small tmpfs for full-disk tests: `mounted_tmpfs` mounts one (which needs root) and unmounts it
on exit; where it cannot, the test is skipped with the reason (not root, or what mount said)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def mounted_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` (mount's form, "16m") on ``path`` (created if missing) and yield
    ``path``; unmount on exit. Skips the test when the mount fails, saying why."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip(f"full-disk test: mounting a {size} tmpfs needs root (running as uid {os.geteuid()})")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"full-disk test: mount -t tmpfs failed ({done.stderr.strip() or done.returncode})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
