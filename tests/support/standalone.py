"""Run `magnetar standalone` as a real subprocess on free ports for end-to-end tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.ports import free_port

READY = re.compile(r"broker: (pulsar://\S+)\s+admin REST: (http://\S+)")


@dataclass
class Standalone:
    """A running standalone process and where it listens."""

    proc: subprocess.Popen[str]
    service_url: str
    admin_url: str
    log_path: Path

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> int:
        """SIGINT and wait for the clean shutdown; return the exit code."""
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=60)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _bookie_port(data_dir: Path) -> int:
    # A bookie's id is host:port and its cookie pins it, so a data directory keeps its port.
    saved = data_dir / "test-bookie-port"
    if not saved.exists():
        saved.write_text(str(free_port()))
    return int(saved.read_text())


def start_standalone(data_dir: Path, *extra: str, timeout: float = 60.0, wrap: tuple[str, ...] = ()) -> Standalone:
    """Start standalone with its data in ``data_dir`` on free ports; wait until it is ready.
    ``wrap`` prefixes the command with one that execs it (``ip netns exec NS``), keeping the pid."""
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir.parent / f"{data_dir.name}-{time.monotonic_ns()}.log"
    cmd = [
        *wrap,
        sys.executable,
        "-m",
        "magnetar",
        "standalone",
        "--data-dir",
        str(data_dir),
        "--set",
        f"standalone.bookie_port={_bookie_port(data_dir)}",
        "--set",
        "standalone.bookie_http_port=0",
        "--set",
        "broker.broker_service_port=0",
        "--set",
        "broker.web_service_port=0",
        *extra,
    ]
    out = open(log_path, "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        cmd, stdout=out, stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = READY.search(log_path.read_text(errors="replace"))
        if match:
            return Standalone(proc, match.group(1), match.group(2), log_path)
        if proc.poll() is not None:
            raise RuntimeError(f"standalone exited with {proc.returncode}:\n{log_path.read_text()}")
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"standalone did not become ready:\n{log_path.read_text()}")
