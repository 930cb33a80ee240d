"""Admin REST calls and namespaces for tests and benchmarks (Pulsar's v2 paths).

* `rest`: one call to an admin URL; AssertionError with the body unless the status is expected.
* `new_namespace`: ``public/<prefix>-<random>``, so tests sharing one server stay apart.
* `new_tenant_ns`: tenant ``name`` and its namespace ``name/ns`` over an ``httpx.Client`` whose
  base URL is the admin URL (the in-process broker fixtures), optionally with deduplication set.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx

__all__ = ["V2", "new_namespace", "new_tenant_ns", "rest"]

V2 = "/admin/v2"


def rest(method: str, admin_url: str, path: str, json: Any = None, ok: tuple[int, ...] = (200, 204)) -> httpx.Response:
    """One admin REST call; AssertionError (with the body) unless the status is in ``ok``."""
    r = httpx.request(method, f"{admin_url}{path}", json=json, timeout=15)
    assert r.status_code in ok, f"{method} {path} -> {r.status_code} {r.text}"
    return r


def new_namespace(admin_url: str, prefix: str) -> str:
    """Create ``public/<prefix>-<random>`` and return it."""
    ns = f"public/{prefix}-{uuid.uuid4().hex[:6]}"
    rest("PUT", admin_url, f"{V2}/namespaces/{ns}")
    return ns


def new_tenant_ns(http: httpx.Client, name: str, *, dedup: bool | None = None) -> str:
    """Create tenant ``name`` and its namespace ``ns`` (with deduplication on or off when
    ``dedup`` says); returns ``"name/ns"``."""
    assert http.put(f"{V2}/tenants/{name}").status_code == 204
    assert http.put(f"{V2}/namespaces/{name}/ns").status_code == 204
    if dedup is not None:
        assert http.post(f"{V2}/namespaces/{name}/ns/deduplication", json=dedup).status_code == 204
    return f"{name}/ns"
