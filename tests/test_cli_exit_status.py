"""Exit status and last log line of ``magnetar bookie|broker|standalone`` (see `magnetar.cli._common`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from magnetar.cli._common import EXIT_CONFIG, EXIT_FATAL, EXIT_START, fail_cleanly_on
from magnetar.common.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def _magnetar(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "magnetar", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def _last_line(result: subprocess.CompletedProcess[str]) -> str:
    return result.stderr.strip().splitlines()[-1]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def _bookie_args(tmp_path: Path) -> list[str]:
    return [
        "bookie",
        "--journal-dir",
        str(tmp_path / "j"),
        "--ledger-dirs",
        str(tmp_path / "l"),
        "--set",
        "listen_address=127.0.0.1",
        "--set",
        "http_address=127.0.0.1",
        "--http-port",
        "0",
    ]


def test_bookie_bad_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    r = _magnetar(*_bookie_args(tmp_path), "--port", "0", "--set", "journalMaxSizeMB=-5", cwd=tmp_path)
    assert r.returncode == EXIT_CONFIG, r.stderr
    last = _last_line(r)
    assert "CRITICAL" in last and "magnetar bookie stopped" in last and "journal" in last
    assert "(exit status 2)" in last


def test_bookie_port_in_use_exits_3_naming_the_port(tmp_path: Path, busy_port: int) -> None:
    r = _magnetar(*_bookie_args(tmp_path), "--port", str(busy_port), cwd=tmp_path)
    assert r.returncode == EXIT_START, r.stderr
    last = _last_line(r)
    assert f"cannot listen on 127.0.0.1:{busy_port} (bookiePort)" in last and "(exit status 3)" in last


def test_bookie_full_disk_fatal_exits_4(tmp_path: Path) -> None:
    st = os.statvfs(tmp_path)
    if (st.f_blocks - st.f_bavail) / st.f_blocks < 0.02:
        pytest.skip("the disk is almost empty: a 1% threshold would not be passed")
    r = _magnetar(
        *_bookie_args(tmp_path),
        "--port",
        "0",
        "--set",
        "diskUsageThreshold=0.01",
        "--set",
        "diskUsageWarnThreshold=0.01",
        "--set",
        "diskUsageLwmThreshold=0.01",
        "--set",
        "readOnlyModeEnabled=false",
        cwd=tmp_path,
    )
    assert r.returncode == EXIT_FATAL, r.stderr
    last = _last_line(r)
    assert "magnetar bookie stopped: disks full and readOnlyModeEnabled is false" in last
    assert "(exit status 4)" in last


def test_bookie_sigterm_exits_0_saying_so(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "magnetar", *_bookie_args(tmp_path), "--port", "0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on" in line
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "magnetar bookie stopped (SIGTERM)" in err.strip().splitlines()[-1]


def test_broker_bad_config_exits_2(tmp_path: Path) -> None:
    r = _magnetar("broker", "--set", "broker.noSuchKey=1", cwd=tmp_path)
    assert r.returncode == EXIT_CONFIG, r.stderr
    assert "magnetar broker stopped" in _last_line(r) and "noSuchKey" in _last_line(r)


def test_standalone_admin_port_in_use_exits_3_naming_it(tmp_path: Path, busy_port: int) -> None:
    r = _magnetar(
        "standalone",
        "--data-dir",
        str(tmp_path / "data"),
        "--set",
        f"broker.webServicePort={busy_port}",
        "--set",
        "broker.brokerServicePort=0",
        "--set",
        "standalone.bookiePort=0",
        "--set",
        "standalone.httpServerPort=0",
        cwd=tmp_path,
    )
    assert r.returncode == EXIT_START, r.stderr
    last = _last_line(r)
    assert "magnetar standalone stopped" in last and f"127.0.0.1:{busy_port} (webServicePort" in last


def test_standalone_full_disk_fatal_exits_4(tmp_path: Path) -> None:
    st = os.statvfs(tmp_path)
    if (st.f_blocks - st.f_bavail) / st.f_blocks < 0.02:
        pytest.skip("the disk is almost empty: a 1% threshold would not be passed")
    r = _magnetar(
        "standalone",
        "--data-dir",
        str(tmp_path / "data"),
        "--set",
        "broker.webServicePort=0",
        "--set",
        "broker.brokerServicePort=0",
        "--set",
        "standalone.bookiePort=0",
        "--set",
        "standalone.httpServerPort=0",
        "--set",
        "bookie.diskUsageThreshold=0.01",
        "--set",
        "bookie.diskUsageWarnThreshold=0.01",
        "--set",
        "bookie.diskUsageLwmThreshold=0.01",
        "--set",
        "bookie.readOnlyModeEnabled=false",
        cwd=tmp_path,
    )
    assert r.returncode == EXIT_FATAL, r.stderr
    assert "magnetar standalone stopped: disks full" in _last_line(r) and "(exit status 4)" in _last_line(r)


def test_fail_cleanly_on_statuses(caplog: pytest.LogCaptureFixture) -> None:
    class Fatal(Exception):
        pass

    def run(exc: BaseException) -> int:
        def boom() -> None:
            raise exc

        wrapped = fail_cleanly_on(ConfigError, OSError, Fatal, name="x", fatal=(Fatal,))(boom)
        with pytest.raises(SystemExit) as stop:
            wrapped()
        return int(stop.value.code or 0)

    assert run(ConfigError("k", "bad")) == EXIT_CONFIG
    assert run(OSError(98, "in use")) == EXIT_START
    assert run(ExceptionGroup("g", [OSError(98, "in use")])) == EXIT_START
    assert run(Fatal("disk")) == EXIT_FATAL
    assert run(RuntimeError("a bug")) == 1
    assert "magnetar x stopped by an unexpected error" in caplog.records[-1].getMessage()
    with pytest.raises(click.UsageError):
        fail_cleanly_on(OSError)(lambda: (_ for _ in ()).throw(click.UsageError("u")))()
