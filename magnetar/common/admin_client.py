"""The client of a Pulsar-style admin REST API, blocking and async: one home for how Magnetar calls
a broker's ``/admin/v2`` paths, whoever calls (``magnetar admin``, the Spark connector's driver,
one broker asking another to unload or split a bundle).

Rules:

* Redirects: in a cluster a broker answers an operation on a topic or bundle it does not own with
  307 (or 308) and the owner's URL in ``Location``. The client follows it with the same method,
  body, query and credentials, at most `MAX_REDIRECTS` hops. httpx's own redirect following stays
  off: it drops ``Authorization`` on a redirect to another origin, and every other broker is one.
* Errors: an answer outside 2xx once the redirects are followed raises `AdminError` with the HTTP
  status and the server's reason (the ``reason`` of Pulsar's error JSON, else the body's text,
  else the status phrase); a server that cannot be reached raises `AdminError` with status 0.
* Credentials and TLS are the caller's: ``headers`` (``Authorization``) go with every request
  and every hop; ``verify`` is httpx's (an `ssl.SSLContext` carrying the trusted CA and the
  client certificate, ``True`` for the system CAs, ``False`` to trust anything).
* `AdminClient` blocks (the CLI and the Spark driver run no event loop); `AsyncAdminClient` is for
  code on trio (the broker), one short-lived connection pool per request. Neither retries.

A leaf module (httpx and the standard library only), so the broker, the Spark connector and the
CLI share it without importing each other.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

import httpx

__all__ = ["MAX_REDIRECTS", "AdminError", "AdminClient", "AsyncAdminClient", "error_reason", "json_body"]

MAX_REDIRECTS = 5
_REDIRECTS = (307, 308)

Verify = ssl.SSLContext | bool


class AdminError(Exception):
    """An admin REST call failed: ``status`` is the HTTP status of the last answer (0 when the
    server could not be reached), ``reason`` the server's reason (or the transport error)."""

    def __init__(self, status: int, reason: str, *, method: str = "", target: str = "") -> None:
        self.status = status
        self.reason = reason
        self.method = method
        self.target = target
        where = f"{method} {target}: " if method or target else ""
        if status:
            super().__init__(f"{where}HTTP {status}: {reason}")
        else:
            super().__init__(f"{where}cannot reach the admin REST API: {reason}")


def error_reason(response: httpx.Response) -> str:
    """The reason an error answer gives: Pulsar's ``{"reason": ...}``, else the body, else the
    status phrase."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("reason"):
        return str(body["reason"])
    return response.text or response.reason_phrase


def json_body(response: httpx.Response) -> Any:
    """The answer's JSON; its text when it is not JSON; None when it is empty (204 and the like)."""
    if response.status_code == 204 or not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text


def _checked(method: str, target: str, response: httpx.Response) -> httpx.Response:
    if not 200 <= response.status_code < 300:
        raise AdminError(response.status_code, error_reason(response), method=method, target=target)
    return response


def _next_hop(response: httpx.Response) -> httpx.URL | None:
    if response.status_code in _REDIRECTS and "location" in response.headers:
        return response.url.join(response.headers["location"])
    return None


def _kwargs(body: Any, params: Mapping[str, Any] | None, headers: Mapping[str, str] | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if body is not None:
        kwargs["json"] = body
    if params:
        kwargs["params"] = dict(params)
    if headers:
        kwargs["headers"] = dict(headers)
    return kwargs


class AdminClient:
    """Blocking calls to the admin REST API at ``base_url`` (module rules). One connection pool for
    the client's life; `close` it (or use it as a context manager)."""

    def __init__(
        self, base_url: str, *, headers: Mapping[str, str] | None = None, verify: Verify = True, timeout_s: float = 30.0
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=timeout_s,
            verify=verify,
            headers=dict(headers or {}),
            follow_redirects=False,
        )

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the connections."""
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """The 2xx answer to ``method path`` (``body`` sent as JSON), redirects followed; raises
        `AdminError` otherwise."""
        kwargs = _kwargs(body, params, headers)
        try:
            response = self._http.request(method, path, **kwargs)
            for _hop in range(MAX_REDIRECTS):
                url = _next_hop(response)
                if url is None:
                    break
                response = self._http.request(method, url, **{k: v for k, v in kwargs.items() if k != "params"})
        except httpx.HTTPError as exc:
            raise AdminError(0, str(exc), method=method, target=f"{self.base_url}{path}") from exc
        return _checked(method, path, response)

    def call(
        self, method: str, path: str, body: Any = None, *, params: Mapping[str, Any] | None = None, ok404: bool = False
    ) -> Any:
        """The decoded answer of `request` (`json_body`); None for a 404 when ``ok404``."""
        try:
            return json_body(self.request(method, path, body, params=params))
        except AdminError as exc:
            if ok404 and exc.status == 404:
                return None
            raise


class AsyncAdminClient:
    """Calls to admin REST APIs at absolute URLs from trio code (module rules): the broker's calls
    to the other brokers of its cluster. ``headers`` go with every request; a request's own
    ``headers`` are added to them (a token read from its file at each call, say)."""

    def __init__(self, *, headers: Mapping[str, str] | None = None, verify: Verify = True) -> None:
        self._headers = dict(headers or {})
        self._verify = verify

    async def request(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
    ) -> httpx.Response:
        """The 2xx answer to ``method url``, redirects followed; raises `AdminError` otherwise."""
        kwargs = _kwargs(body, params, {**self._headers, **(headers or {})})
        try:
            async with httpx.AsyncClient(timeout=timeout_s, verify=self._verify, follow_redirects=False) as http:
                response = await http.request(method, url, **kwargs)
                for _hop in range(MAX_REDIRECTS):
                    hop = _next_hop(response)
                    if hop is None:
                        break
                    response = await http.request(method, hop, **{k: v for k, v in kwargs.items() if k != "params"})
        except httpx.HTTPError as exc:
            raise AdminError(0, str(exc), method=method, target=url) from exc
        return _checked(method, url, response)
