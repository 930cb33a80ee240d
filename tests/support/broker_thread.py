"""An in-process broker, optionally with its admin REST server, run in a background thread.

Storage is MockBookKeeper (``bk``) and the memory metadata store. Tests drive the broker with the
official (blocking) ``pulsar-client`` from the test thread (``url``; `tests.support.clients`
opens one), talk to the admin server with httpx (``http``, when started with ``admin=True``), and
run coroutines on the broker's trio loop with `call` (admin-style setup such as creating
namespaces).
The broker and admin fixtures of tests/broker and tests/broker_admin both use this one harness.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Self

import trio

from bk_client.testing import MockBookKeeper
from broker import BrokerConfig, BrokerService, serve_broker
from broker.admin import serve_admin
from managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from metadata import open_metadata_store

_ids = itertools.count()


def loopback_config(**overrides: Any) -> BrokerConfig:
    """The config `BrokerThread` runs by default (loopback, free ports), with ``overrides``."""
    return BrokerConfig(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=0,
        web_service_port=0,
        **overrides,
    )


class BrokerThread:
    """Start with `start()` (or ``with``), stop with `stop()`.

    ``config`` defaults to a broker on 127.0.0.1 with both ports 0 (the servers bind free ports,
    given back in ``port`` and ``http_port``); ``ml_config`` to single-bookie ledgers (the mock
    has no real bookies). ``admin=True`` also serves the admin REST API.
    """

    def __init__(
        self,
        config: BrokerConfig | None = None,
        ml_config: ManagedLedgerConfig | None = None,
        *,
        admin: bool = False,
        tier: Any = None,
    ) -> None:
        self.config = config or loopback_config()
        self.ml_config = ml_config or ManagedLedgerConfig(ensemble_size=1, write_quorum=1, ack_quorum=1)
        self.admin = admin
        self.tier = tier  # a tiered_storage.TieredStorage for the factory (None: no offloading)
        self.port = 0
        self.http_port = 0
        self.bk = MockBookKeeper()
        self.service: BrokerService | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="admin-broker" if admin else "broker", daemon=True)

    @property
    def url(self) -> str:
        """The broker's pulsar:// URL."""
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def http(self) -> str:
        """The admin server's base URL (only served with ``admin=True``)."""
        return f"http://127.0.0.1:{self.http_port}"

    def start(self) -> Self:
        """Start the broker (and admin server); wait until it listens. Raises `RuntimeError` when it
        does not start within 30 s or fails while starting."""
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("broker did not start")
        if self._error is not None:
            raise RuntimeError("broker failed to start") from self._error
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _main(self) -> None:
        try:
            trio.run(self._run)
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _run(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        async with open_metadata_store(f"memory://broker-test-{next(_ids)}") as store:
            factory = ManagedLedgerFactory(self.bk, store, self.ml_config, tier=self.tier)
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                await nursery.start(factory.run)
                self.service = BrokerService(factory, store, self.config)
                # free ports; a plain port switched off in the config (None) stays off, and TLS ports
                # come from the config (brokerServicePortTls / webServicePortTls, 0 = a free one)
                plain = None if self.config.broker_service_port is None else 0
                self.port = await nursery.start(serve_broker, self.service, "127.0.0.1", plain)
                if self.admin:
                    web = None if self.config.web_service_port is None else 0
                    self.http_port = await nursery.start(serve_admin, self.service, "127.0.0.1", web)
                self._ready.set()

    def call(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Run ``await fn(*args)`` on the broker's loop and return its result."""
        assert self._token is not None
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def stop(self) -> None:
        """Cancel everything (topics are unloaded) and join the thread."""
        if self._token is not None and self._scope is not None:
            try:
                trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join(30)
