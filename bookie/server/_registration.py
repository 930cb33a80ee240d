"""Keep the bookie's ephemeral registration in step with its state.

A writable bookie has the ephemeral node ``{root}/ledgers/available/{bookieId}``; a read-only one
``{root}/ledgers/available/readonly/{bookieId}`` instead (BookKeeper's layout, which clients list
to pick ensembles). The node holds the bookie's ``BookieServiceInfo`` (its endpoints, in BookKeeper's
binary format, which BookKeeper's clients read to find the bookie's address). The task re-creates
the node after the metadata session was lost (its ephemerals are then gone), and moves it on
every state change. A stale node of the same id from an earlier, crashed process (its session
not expired yet) is replaced.
"""

from __future__ import annotations

import logging

import trio

from metadata import (
    ConnectionLossError,
    MetadataError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    SessionState,
    ensure_path,
)
from protocols.bookkeeper import BookieServiceInfo, available_path, readonly_path

from ._bookie import Bookie, BookieState

__all__ = ["run_registration", "registration_path"]

log = logging.getLogger(__name__)

_RETRY_S = 0.5


def registration_path(root: str, bookie_id: str, state: BookieState) -> str:
    """Where a bookie in ``state`` is registered."""
    if state is BookieState.WRITABLE:
        return available_path(root, bookie_id)
    return readonly_path(root, bookie_id)


async def _create(store: MetadataStore, path: str, data: bytes) -> None:
    try:
        await store.create(path, data, ephemeral=True)
        return
    except NodeExistsError:
        pass
    stat = await store.exists(path)
    if stat is not None and stat.ephemeral_owner == store.session_id:
        return
    log.warning("replacing the stale registration %s of an earlier session", path)
    try:
        await store.delete(path)
    except NoNodeError:
        pass
    await store.create(path, data, ephemeral=True)


async def _delete(store: MetadataStore, path: str) -> None:
    try:
        stat = await store.exists(path)
        if stat is not None and stat.ephemeral_owner == store.session_id:
            await store.delete(path)
    except NoNodeError:
        pass


async def run_registration(
    bookie: Bookie,
    store: MetadataStore,
    *,
    service_info: BookieServiceInfo | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Register the bookie and keep the registration current until cancelled (then remove it).
    The node's data is ``service_info`` (by default the ``bookie-rpc`` endpoint its id names).

    ``task_status.started`` is called once the first registration exists. Metadata errors are
    logged and retried; they never end the task.
    """
    root, bid = bookie.config.metadata_root, bookie.bookie_id
    data = (service_info or BookieServiceInfo.legacy(bid)).encode()
    await ensure_path(store, available_path(root))
    await ensure_path(store, readonly_path(root))
    send, recv = trio.open_memory_channel[None](1)

    def poke() -> None:
        try:
            send.send_nowait(None)
        except trio.WouldBlock:
            pass

    lost = False

    async def watch_state() -> None:
        while True:
            await bookie.wait_state_change()
            poke()

    async def watch_session() -> None:
        nonlocal lost
        async with store.watch_session() as events:
            async for state in events:
                if state is SessionState.LOST:
                    lost = True
                if state in (SessionState.CONNECTED, SessionState.LOST):
                    poke()

    registered: BookieState | None = None
    started = False
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_state)
            nursery.start_soon(watch_session)
            while True:
                want = bookie.state
                if lost:
                    registered, lost = None, False
                if registered is not want:
                    try:
                        if registered is not None:
                            await _delete(store, registration_path(root, bid, registered))
                        else:  # after a restart or session loss, drop a leftover of the other kind
                            other = BookieState.READ_ONLY if want is BookieState.WRITABLE else BookieState.WRITABLE
                            await _delete(store, registration_path(root, bid, other))
                        await _create(store, registration_path(root, bid, want), data)
                        registered = want
                        log.info("bookie %s registered as %s", bid, want.value)
                    except (ConnectionLossError, MetadataError) as exc:
                        log.warning("bookie registration failed (retrying): %s", exc)
                        await trio.sleep(_RETRY_S)
                        continue
                if not started:
                    task_status.started()
                    started = True
                await recv.receive()
    finally:
        if registered is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                try:
                    await _delete(store, registration_path(root, bid, registered))
                except MetadataError:
                    pass
