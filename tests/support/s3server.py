"""A real S3-compatible server for the tiered-storage tests: the Versity S3 Gateway over a
temporary directory, built by ``tests/resources/s3server/install.sh`` (``go install`` from the Go
module proxy, into a cache outside the repository) and run on a free loopback port.

    server = S3Server.start_new(tmp_dir)       # or the ``s3_server`` fixture (session scope)
    server.create_bucket("offload")
    server.stop(); server.start()               # down and up again on the same port and data
    server.pause(); server.resume()             # SIGSTOP / SIGCONT: requests hang, then go on
    server.keys("offload")                      # what the bucket holds

The fixture skips the test, saying why, only when the Go module proxy cannot be reached; any other
build failure fails it. The server is stopped by its pid.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.ports import free_port

__all__ = ["ACCESS_KEY", "SECRET_KEY", "S3Server", "build_s3_server", "s3_server"]

_INSTALL = Path(__file__).resolve().parents[1] / "resources" / "s3server" / "install.sh"
ACCESS_KEY = "magnetar-test"
SECRET_KEY = "magnetar-test-secret"


class S3ProxyUnreachable(RuntimeError):
    """The Go module proxy could not be reached to build the server."""


def build_s3_server() -> Path:
    """The server binary, built once per machine (see the module docstring)."""
    built = subprocess.run(["bash", str(_INSTALL)], capture_output=True, text=True, timeout=1800)
    if built.returncode == 3:
        raise S3ProxyUnreachable(built.stderr[-800:])
    if built.returncode != 0:
        raise RuntimeError(f"building the S3 server failed ({built.returncode}):\n{built.stderr[-3000:]}")
    return Path(built.stdout.strip().splitlines()[-1])


class S3Server:
    """One server process; ``endpoint`` is its ``http://127.0.0.1:port``."""

    def __init__(self, binary: Path, data: Path, port: int) -> None:
        self.binary = binary
        self.data = data
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data.parent / f"s3server-{port}.log"

    @classmethod
    def start_new(cls, binary: Path, base: Path) -> S3Server:
        """A server on a free port with its data under ``base``."""
        data = base / "s3data"
        data.mkdir(parents=True, exist_ok=True)
        server = cls(binary, data, free_port())
        server.start()
        return server

    @property
    def endpoint(self) -> str:
        """The service endpoint (s3ManagedLedgerOffloadServiceEndpoint)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        """Start (again) on the same port and data; returns once it accepts connections."""
        with open(self.log, "a") as out:
            self.proc = subprocess.Popen(
                [
                    str(self.binary),
                    "--access",
                    ACCESS_KEY,
                    "--secret",
                    SECRET_KEY,
                    "--port",
                    f"127.0.0.1:{self.port}",
                    "--quiet",
                    "posix",
                    str(self.data),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the S3 server exited: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("the S3 server did not start listening")

    def stop(self) -> None:
        """SIGTERM by pid (SIGKILL after 10 s); the port is free again when this returns."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGCONT)  # a paused server could not act on SIGTERM
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP: connections are still accepted (the kernel's backlog) but nothing is answered,
        so a request in flight hangs until `resume`."""
        assert self.proc is not None and self.proc.poll() is None, "the S3 server is not running"
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def client(self) -> Any:
        """A boto3 S3 client of this server (path-style, the test credentials)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 2},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )

    def create_bucket(self, name: str) -> None:
        """Create ``name`` (an existing one is fine)."""
        c = self.client()
        try:
            c.create_bucket(Bucket=name)
        except c.exceptions.BucketAlreadyOwnedByYou:
            pass

    def keys(self, bucket: str) -> list[str]:
        """Every object key of ``bucket``."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A running S3 server for the whole test run (see the module docstring)."""
    try:
        binary = build_s3_server()
    except S3ProxyUnreachable as exc:
        pytest.skip(f"the Go module proxy cannot be reached to build the S3 server: {exc}")
    server = S3Server.start_new(binary, tmp_path_factory.mktemp("s3"))
    try:
        yield server
    finally:
        server.stop()
