"""Shared pieces of the admin handlers: errors as ``{"reason": ...}``, JSON bodies, name parsing.

Status codes follow Pulsar's admin API: 404 for an unknown cluster, tenant, namespace, topic or
subscription; 409 when something exists already (or still has children); 412 for a failed
precondition (invalid names, active producers/consumers); 400 for a body that does not parse;
204 for a successful change that returns nothing.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from managed_ledger import ManagedLedgerError

from .._errors import BrokerServiceError, NamespaceNotFoundError, ServiceNotReadyError, TopicNotFoundError
from .._topic_name import InvalidTopicNameError, NamespaceName, TopicName

if TYPE_CHECKING:
    from .._service import BrokerService

__all__ = ["RestError", "endpoint", "json_body", "service_of", "namespace_of", "topic_of", "no_content",
           "json_response", "require_namespace", "query_bool"]

log = logging.getLogger("broker.admin")

Handler = Callable[[Request], Awaitable[Response]]


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


async def json_body(request: Request, *, default: Any = ..., what: str = "body") -> Any:
    """The request's JSON body; ``default`` when it is empty (else 400). Bad JSON is 400."""
    raw = await request.body()
    if not raw.strip():
        if default is ...:
            raise RestError(400, f"missing {what}")
        return default
    try:
        return json.loads(raw)
    except ValueError:
        # pulsar-admin sends strings such as a schema strategy as bare text too
        text = raw.decode("utf-8", "replace").strip()
        if text.isidentifier():
            return text
        raise RestError(400, f"{what} is not valid JSON") from None


def namespace_of(request: Request) -> NamespaceName:
    """``{tenant}/{namespace}`` of the path; 412 when invalid."""
    p = request.path_params
    return NamespaceName.parse(f"{p['tenant']}/{p['namespace']}")


def topic_of(request: Request) -> TopicName:
    """The persistent topic of the path; 412 when invalid."""
    p = request.path_params
    return TopicName.parse(f"persistent://{p['tenant']}/{p['namespace']}/{p['topic']}")


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
