"""The bookie's HTTP endpoints, served by hypercorn on trio, queried with httpx."""

from __future__ import annotations

from pathlib import Path

import httpx
import trio

from bookie import BookieState, open_bookie, serve_bookie_http
from tests.support.bookie_server import KEY, entry, make_config


async def test_metrics_info_and_state_endpoints(tmp_path: Path) -> None:
    async with open_bookie(make_config(tmp_path)) as bookie, trio.open_nursery() as nursery:
        urls = await nursery.start(serve_bookie_http, bookie, "127.0.0.1", 0)
        base = urls[0]
        await bookie.add_entry(1, 0, KEY, entry(1, 0, b"x"))
        async with httpx.AsyncClient(base_url=base) as http:
            metrics = (await http.get("/metrics")).text
            assert "bookie_journal_JOURNAL_ADD_ENTRY_bucket" in metrics
            assert "bookie_write_cache_size" in metrics
            assert "bookie_server_ADD_ENTRY_REQUEST" in metrics
            assert "bookie_entry_log_count" in metrics
            assert "bookie_SERVER_STATUS 1.0" in metrics

            info = (await http.get("/api/v1/bookie/info")).json()
            assert info["bookieId"] == bookie.bookie_id
            assert info["totalSpace"] >= info["freeSpace"] > 0
            assert info["state"] == "writable"

            assert (await http.get("/api/v1/bookie/state")).json()["readOnly"] is False
            resp = await http.put("/api/v1/bookie/state", json={"readOnly": True})
            assert resp.status_code == 200 and resp.json()["readOnly"] is True
            assert bookie.state is BookieState.READ_ONLY
            resp = await http.put("/api/v1/bookie/state/readonly", json={"readOnly": False})
            assert resp.json() == {"running": True, "readOnly": False, "reasons": []}
            assert bookie.state is BookieState.WRITABLE
            assert (await http.put("/api/v1/bookie/state", content=b"nonsense")).status_code == 400
            assert (await http.put("/api/v1/bookie/state", json={"readOnly": "yes"})).status_code == 400
        nursery.cancel_scope.cancel()


async def test_heartbeat_and_is_ready_follow_the_bookie(tmp_path: Path) -> None:
    async with open_bookie(make_config(tmp_path)) as bookie, trio.open_nursery() as nursery:
        urls = await nursery.start(serve_bookie_http, bookie, "127.0.0.1", 0)
        async with httpx.AsyncClient(base_url=urls[0]) as http:
            beat = await http.get("/heartbeat")
            assert beat.status_code == 200 and beat.text == "OK\n"
            # nobody said it serves yet (serve_bookie_process does once serving and registered)
            resp = await http.get("/api/v1/bookie/is_ready")
            assert resp.status_code == 503 and "not ready" in resp.text
            bookie.set_ready(True)
            resp = await http.get("/api/v1/bookie/is_ready")
            assert resp.status_code == 200 and resp.text == "OK"
            bookie.fail_fatally("test: disks gone")
            assert (await http.get("/api/v1/bookie/is_ready")).status_code == 503
            assert (await http.get("/heartbeat")).status_code == 200
        nursery.cancel_scope.cancel()


async def test_whole_bookie_process_is_ready_once_registered(tmp_path: Path) -> None:
    from bookie import BookieEndpoints, serve_bookie_process
    from metadata import open_metadata_store
    from protocols.bookkeeper import available_path

    url = "memory://is-ready"
    cfg = make_config(tmp_path, metadata_url=url, bookie_id="ready-bookie")
    async with open_metadata_store(url) as observer:
        async with trio.open_nursery() as nursery:
            endpoints: BookieEndpoints = await nursery.start(serve_bookie_process, cfg)
            assert "ready-bookie" in await observer.children(available_path(""))
            async with httpx.AsyncClient(base_url=endpoints.http_urls[0]) as http:
                resp = await http.get("/api/v1/bookie/is_ready")
                assert resp.status_code == 200 and resp.text == "OK"
            nursery.cancel_scope.cancel()
