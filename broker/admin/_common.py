"""Shared pieces of the admin handlers: errors as ``{"reason": ...}``, JSON bodies, name parsing,
bounds on what a request may make the broker store or do.

Status codes follow Pulsar's admin API: 404 for an unknown cluster, tenant, namespace, topic or
subscription; 409 when something exists already (or still has children); 412 for a failed
precondition (invalid names, active producers/consumers); 400 for a body that does not parse or
has the wrong JSON type (``null`` included), and for a path parameter that is not a number in
range; 406 for a number of partitions out of bounds; 413 for a body too large to parse or store;
204 for a successful change that returns nothing.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import trio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from managed_ledger import ManagedLedgerError
from protocols.pulsar import InvalidTopicNameError, NamespaceName, TopicName, check_subscription_name

from .._errors import BrokerServiceError, NamespaceNotFoundError, ServiceNotReadyError, TopicNotFoundError

if TYPE_CHECKING:
    from .._service import BrokerService

__all__ = [
    "RestError",
    "endpoint",
    "json_body",
    "service_of",
    "namespace_of",
    "topic_of",
    "no_content",
    "json_response",
    "require_namespace",
    "query_bool",
    "tenant_of",
    "subscription_of",
    "int_param",
    "check_stored_size",
    "check_partitions",
    "for_each_bounded",
    "FANOUT_CONCURRENCY",
    "INT32_MAX",
    "INT64_MAX",
]

log = logging.getLogger("broker.admin")

Handler = Callable[[Request], Awaitable[Response]]
T = TypeVar("T")
R = TypeVar("R")

INT32_MAX = 2**31 - 1
"""Largest Java ``int``: Pulsar's bound for counts such as partitions and messages to skip."""
INT64_MAX = 2**63 - 1
"""Largest Java ``long``: Pulsar's bound for ledger ids, entry ids and timestamps."""

FANOUT_CONCURRENCY = 16
"""Partitions one admin request works on at once (loading, subscribing, deleting): enough to
overlap metadata and bookie round trips, few enough that one request cannot flood either."""


class RestError(Exception):
    """An admin request failed with ``status``; the client sees ``{"reason": reason}``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def json_response(value: Any, status: int = 200) -> Response:
    """``value`` as JSON (None is answered 204, as Pulsar's admin API answers an unset policy)."""
    if value is None:
        return Response(status_code=204)
    return JSONResponse(value, status_code=status)


def no_content() -> Response:
    """204 No Content."""
    return Response(status_code=204)


def endpoint(fn: Handler) -> Handler:
    """Wrap a handler so that every failure becomes a JSON ``reason`` with the right status."""

    @functools.wraps(fn)
    async def wrapper(request: Request) -> Response:
        try:
            return await fn(request)
        except RestError as exc:
            status, reason = exc.status, exc.reason
        except NamespaceNotFoundError as exc:
            status, reason = 404, exc.message
        except TopicNotFoundError as exc:
            status, reason = 404, exc.message
        except InvalidTopicNameError as exc:
            status, reason = 412, str(exc)
        except ServiceNotReadyError as exc:
            status, reason = 503, exc.message
        except BrokerServiceError as exc:
            status, reason = 500, exc.message
        except ManagedLedgerError as exc:
            status, reason = 500, f"storage error: {exc}"
        except Exception as exc:  # a bug must answer 500, not drop the connection
            log.exception("admin %s %s failed", request.method, request.url.path)
            status, reason = 500, f"{type(exc).__name__}: {exc}"
        return JSONResponse({"reason": reason}, status_code=status)

    return wrapper


def service_of(request: Request) -> BrokerService:
    """The broker service the app serves."""
    return request.app.state.service


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


async def json_body(request: Request, *, default: Any = ..., what: str = "body") -> Any:
    """The request's JSON body; ``default`` when it is empty (else 400).

    Raises `RestError` 400 for a body that is not JSON (``NaN`` and ``Infinity`` included) or is
    nested too deeply to parse, and for a literal ``null`` (no endpoint takes one: an absent value
    is an empty body); 413 once the body passes ``admin_max_stored_value_bytes``, without reading
    the rest (no admin body is worth more than one stored metadata value).
    """
    limit = service_of(request).config.admin_max_stored_value_bytes
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RestError(413, f"{what} exceeds admin_max_stored_value_bytes ({limit} bytes)")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        if default is ...:
            raise RestError(400, f"missing {what}")
        return default
    try:
        value = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise RestError(400, f"{what} is nested too deeply") from None
    except ValueError:
        # pulsar-admin sends strings such as a schema strategy as bare text too
        text = raw.decode("utf-8", "replace").strip()
        if text.isidentifier() and text not in ("NaN", "Infinity"):
            return text
        raise RestError(400, f"{what} is not valid JSON") from None
    if value is None:
        raise RestError(400, f"{what} must not be null")
    return value


def check_stored_size(request: Request, value: Any, what: str) -> None:
    """Raise `RestError` 413 when ``value``, as the JSON stored in metadata, is larger than
    ``admin_max_stored_value_bytes``."""
    limit = service_of(request).config.admin_max_stored_value_bytes
    size = len(json.dumps(value).encode())
    if size > limit:
        raise RestError(
            413, f"{what} would be {size} bytes once stored: more than admin_max_stored_value_bytes ({limit} bytes)"
        )


def check_partitions(request: Request, n: Any, what: str = "number of partitions") -> int:
    """``n`` as a number of partitions: 400 unless a JSON integer up to `INT32_MAX`; 406 (with
    Pulsar's reasons) when not positive or above ``maxNumPartitionsPerPartitionedTopic``."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise RestError(400, f"{what} must be an integer, not {n!r}")
    if n > INT32_MAX:
        raise RestError(400, f"{what} must be at most {INT32_MAX}, not {n}")
    if n <= 0:
        raise RestError(406, "Number of partitions should be more than 0")
    most = service_of(request).config.max_num_partitions_per_partitioned_topic
    if 0 < most < n:
        raise RestError(406, f"Number of partitions should be less than or equal to {most}")
    return n


def int_param(request: Request, name: str, what: str, *, minimum: int, maximum: int) -> int:
    """The path parameter ``name`` as an integer in [minimum, maximum]; 400 naming ``what`` otherwise."""
    raw = request.path_params[name]
    try:
        value = int(raw)
    except ValueError:
        raise RestError(400, f"{what} must be an integer, not {raw!r}") from None
    if not minimum <= value <= maximum:
        raise RestError(400, f"{what} must be between {minimum} and {maximum}, not {value}")
    return value


def tenant_of(request: Request) -> str:
    """The ``{tenant}`` of the path; 412 "Tenant name is not valid" (Pulsar's answer) when invalid."""
    tenant = request.path_params["tenant"]
    try:
        NamespaceName.parse(f"{tenant}/x")
    except InvalidTopicNameError as exc:
        raise RestError(412, f"Tenant name is not valid: {exc}") from None
    return tenant


def namespace_of(request: Request) -> NamespaceName:
    """``{tenant}/{namespace}`` of the path; 412 "Namespace name is not valid" when invalid."""
    p = request.path_params
    try:
        return NamespaceName.parse(f"{p['tenant']}/{p['namespace']}")
    except InvalidTopicNameError as exc:
        raise RestError(412, f"Namespace name is not valid: {exc}") from None


def topic_of(request: Request, domain: str = "persistent") -> TopicName:
    """The topic of the path in ``domain`` (``persistent`` or ``non-persistent``); 412 "Topic name
    is not valid" when invalid."""
    p = request.path_params
    try:
        return TopicName.parse(f"{domain}://{p['tenant']}/{p['namespace']}/{p['topic']}")
    except InvalidTopicNameError as exc:
        raise RestError(412, f"Topic name is not valid: {exc}") from None


def subscription_of(request: Request) -> str:
    """The ``{subscription}`` of the path; 412 "Subscription name is not valid" when invalid."""
    try:
        return check_subscription_name(request.path_params["subscription"])
    except InvalidTopicNameError as exc:
        raise RestError(412, f"Subscription name is not valid: {exc}") from None


async def require_namespace(service: BrokerService, ns: NamespaceName) -> dict[str, Any]:
    """The namespace's policies; 404 naming what is missing (tenant or namespace)."""
    policies = await service.namespaces.get_policies(ns)
    if policies is None:
        if not await service.namespaces.tenant_exists(ns.tenant):
            raise RestError(404, f"Tenant {ns.tenant} does not exist")
        raise RestError(404, f"Namespace {ns} does not exist")
    return policies


def query_bool(request: Request, name: str) -> bool:
    """A boolean query parameter (``true``/``1``/``yes``), False when absent."""
    return request.query_params.get(name, "false").lower() in ("true", "1", "yes")


async def for_each_bounded(
    items: Sequence[T], fn: Callable[[T], Awaitable[R]], *, concurrency: int = FANOUT_CONCURRENCY
) -> list[R]:
    """``[await fn(item) for item in items]`` with at most ``concurrency`` calls running at once, in
    the calling task's nursery scope (so cancelling the request stops them and starts no more).

    Only ``concurrency`` tasks exist whatever the number of items. The first exception from ``fn``
    cancels the other calls and is raised as is (not in an exception group).
    """
    results: list[Any] = [None] * len(items)
    pending = iter(enumerate(items))
    failures: list[Exception] = []

    async def worker(cancel: trio.CancelScope) -> None:
        for i, item in pending:  # one shared iterator: each item is taken by exactly one worker
            try:
                results[i] = await fn(item)
            except Exception as exc:
                failures.append(exc)
                cancel.cancel()
                return

    async with trio.open_nursery() as nursery:
        for _ in range(min(concurrency, len(items))):
            nursery.start_soon(worker, nursery.cancel_scope)
    if failures:
        raise failures[0]
    return results
