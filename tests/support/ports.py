"""Free loopback ports for servers that tests and benchmarks start as separate processes (a server
started in-process binds port 0 and reports its port instead)."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picked it for a socket that
    is closed again). Another process may take it before the caller binds it: use it at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
