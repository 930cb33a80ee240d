"""Dynamic broker configuration over the admin REST, with Pulsar's paths (see
`broker._dynamic_config` for which keys, where they are stored and how brokers apply them).

* ``GET /admin/v2/brokers/configuration`` - the names of the dynamic keys (a JSON list).
* ``GET /admin/v2/brokers/configuration/values`` - the stored overrides ``{name: value}``.
* ``GET /admin/v2/brokers/configuration/runtime`` - every key of this broker's running config by
  Pulsar's name, values as strings (secrets shown as ``******``).
* ``POST /admin/v2/brokers/configuration/{name}/{value}`` - store an override (204); 412 for a key
  that is not dynamic or a value that does not validate (Pulsar's answer for both).
* ``DELETE /admin/v2/brokers/configuration/{name}`` - remove the override (204): the config
  file's value applies again.

Authorization (`_auth`): super users only, as every ``brokers`` path.
"""

from __future__ import annotations

from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from magnetar.common.config import ConfigError

from .._dynamic_config import DYNAMIC_KEYS, DynamicConfig, runtime_values
from ._common import RestError, endpoint, json_response, no_content, service_of

__all__ = ["routes"]


@endpoint
async def dynamic_names(request: Request) -> Response:
    return json_response(list(DYNAMIC_KEYS))


@endpoint
async def stored_values(request: Request) -> Response:
    return json_response(await DynamicConfig.stored(service_of(request).store))


@endpoint
async def runtime(request: Request) -> Response:
    return json_response(runtime_values(service_of(request).config))


async def _update(request: Request, value: str | None) -> Response:
    s = service_of(request)
    name = request.path_params["name"]
    try:
        await s.dynamic_config.update(s.store, name, value)
    except ConfigError as exc:
        raise RestError(412, str(exc)) from None
    await s.dynamic_config.refresh(s)  # this broker at once; the others on their next recheck
    return no_content()


@endpoint
async def update(request: Request) -> Response:
    return await _update(request, unquote(request.path_params["value"]))


@endpoint
async def delete(request: Request) -> Response:
    return await _update(request, None)


def routes() -> list[Route]:
    """The routes of this module."""
    base = "/admin/v2/brokers/configuration"
    return [
        Route(base, dynamic_names, methods=["GET"]),
        Route(f"{base}/values", stored_values, methods=["GET"]),
        Route(f"{base}/runtime", runtime, methods=["GET"]),
        Route(base + "/{name}/{value}", update, methods=["POST"]),
        Route(base + "/{name}", delete, methods=["DELETE"]),
    ]
