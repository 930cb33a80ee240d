"""`magnetar.common.admin_client` against two real HTTP servers (`magnetar.common.http_server`):
a 307 to the "owner" is followed with the credentials, the body and the method; errors carry the
status and the server's reason; an unreachable server is status 0; a redirect loop stops."""

from __future__ import annotations

import functools
import logging
import socket

import pytest
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from magnetar.common.admin_client import MAX_REDIRECTS, AdminClient, AdminError, AsyncAdminClient
from magnetar.common.http_server import serve_http

LOG = logging.getLogger("test.admin_client")


def _owner_app() -> Starlette:
    async def echo(request: Request) -> Response:
        if request.headers.get("authorization") != "Bearer secret":
            return JSONResponse({"reason": "no credentials"}, status_code=401)
        body = await request.body()
        return JSONResponse({"method": request.method, "query": str(request.url.query), "body": body.decode() or None})

    async def gone(request: Request) -> Response:
        return JSONResponse({"reason": "Topic not found"}, status_code=404)

    async def plain_error(request: Request) -> Response:
        return PlainTextResponse("broken", status_code=500)

    async def empty(request: Request) -> Response:
        return Response(status_code=204)

    return Starlette(
        routes=[
            Route("/echo", echo, methods=["GET", "PUT", "POST"]),
            Route("/gone", gone),
            Route("/plain-error", plain_error),
            Route("/empty", empty, methods=["DELETE"]),
        ]
    )


def _front_app(owner: str) -> Starlette:
    async def redirect(request: Request) -> Response:
        query = f"?{request.url.query}" if request.url.query else ""
        return RedirectResponse(f"{owner}{request.url.path}{query}", status_code=307)

    async def loop(request: Request) -> Response:
        return RedirectResponse("/loop", status_code=307)

    return Starlette(
        routes=[Route("/loop", loop), Route("/{path:path}", redirect, methods=["GET", "PUT", "POST", "DELETE"])]
    )


async def _serve(nursery: trio.Nursery, app: Starlette) -> str:
    urls = await nursery.start(functools.partial(serve_http, app, plain=[("127.0.0.1", 0)], keys="test", errorlog=LOG))
    return urls[0]


async def test_redirects_are_followed_with_credentials_method_and_body() -> None:
    async with trio.open_nursery() as nursery:
        owner = await _serve(nursery, _owner_app())
        front = await _serve(nursery, _front_app(owner))

        def blocking() -> object:
            with AdminClient(front, headers={"Authorization": "Bearer secret"}) as client:
                return client.call("PUT", "/echo", {"n": 1}, params={"force": "true"})

        answer = await trio.to_thread.run_sync(blocking)
        assert answer == {"method": "PUT", "query": "force=true", "body": '{"n":1}'}
        async_answer = await AsyncAdminClient(headers={"Authorization": "Bearer secret"}).request(
            "POST", f"{front}/echo", [1, 2]
        )
        assert async_answer.json() == {"method": "POST", "query": "", "body": "[1,2]"}
        nursery.cancel_scope.cancel()


async def test_errors_carry_the_status_and_the_reason() -> None:
    async with trio.open_nursery() as nursery:
        owner = await _serve(nursery, _owner_app())
        front = await _serve(nursery, _front_app(owner))

        def blocking() -> list[AdminError | object]:
            out: list[AdminError | object] = []
            with AdminClient(front) as client:
                for path in ("/gone", "/plain-error", "/echo"):
                    try:
                        client.request("GET", path)
                    except AdminError as exc:
                        out.append(exc)
                out.append(client.call("GET", "/gone", ok404=True))
                out.append(client.call("DELETE", "/empty"))
            return out

        gone, plain, unauthorized, missing, empty = await trio.to_thread.run_sync(blocking)
        assert isinstance(gone, AdminError) and (gone.status, gone.reason) == (404, "Topic not found")
        assert "HTTP 404: Topic not found" in str(gone)
        assert isinstance(plain, AdminError) and (plain.status, plain.reason) == (500, "broken")
        assert isinstance(unauthorized, AdminError) and unauthorized.status == 401  # no credentials given
        assert missing is None and empty is None
        with pytest.raises(AdminError) as looped:
            await AsyncAdminClient().request("GET", f"{front}/loop")
        assert looped.value.status == 307  # gave up after MAX_REDIRECTS hops
        assert MAX_REDIRECTS == 5
        nursery.cancel_scope.cancel()


async def test_an_unreachable_server_is_status_zero() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(AdminError) as caught:
            await AsyncAdminClient().request("GET", f"http://127.0.0.1:{port}/x", timeout_s=5)
    assert caught.value.status == 0 and "cannot reach" in str(caught.value)


async def test_a_busy_port_names_the_config_keys() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        async with trio.open_nursery() as nursery:
            with pytest.raises(OSError, match=rf"cannot listen on 127.0.0.1:{port} \(webServicePort\)"):
                await nursery.start(
                    functools.partial(
                        serve_http, _owner_app(), plain=[("127.0.0.1", port)], keys="webServicePort", errorlog=LOG
                    )
                )
