"""`BookieGcView`: the broker's client of the bookies' GC explain, for explain-storage and metrics.

* Bookies are found through their registrations in the metadata store
  (``{root}/ledgers/available/{bookieId}`` and ``.../available/readonly/{bookieId}``, JSON with
  ``host`` and ``httpUrls``); a URL bound to a wildcard address gets the advertised host.
* The topic's ledgers' ensembles come from their metadata (`managed_ledger.ledger_placements`).
* Each bookie's ``GET /api/v1/bookie/gc/explain`` is asked concurrently, each within
  ``timeout_s``; a bookie that does not answer is reported as unreachable, the rest still joined.
* Deleted ledgers have no metadata left, so the view remembers what retention trimmed per topic
  (`TrimHistory`, bounded) by reading the retention service's reports, and where earlier bookie
  answers saw each ledger (bounded LRU), so that bytes left as garbage in an entry log after the
  bookie dropped the ledger from its index can still be attributed.
* The trim history is also kept in the metadata store (`TrimHistoryStore`, bounded, under
  ``/admin/storage/trimmed-ledgers``): loaded before the first explain or refresh, new trims
  written by `run` every half second and once more when it stops, so a restarted broker still
  explains ledgers trimmed before the restart.
* `run` refreshes ``bytes awaiting bookie GC`` (sum over bookies, `awaiting_gc_bytes`) for the
  synchronous ``/metrics`` hook, every ``refresh_interval_s``.
"""

from __future__ import annotations

import functools
import logging
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import trio

from managed_ledger import bookie_http_url, ledger_placements
from metadata import MetadataError, MetadataStore, NoNodeError
from retention import RetentionService, TopicReport, topic_of

from ._gc_join import BookieAnswer, TrimmedLedger, awaiting_gc_bytes, join_gc_explain, ledger_sightings
from ._trim_store import DEFAULT_MAX_AGE_MS, TRIM_HISTORY_PATH, TrimHistoryStore

__all__ = ["BookieGcView", "TrimHistory"]

log = logging.getLogger(__name__)

_WILDCARDS = {"0.0.0.0", "::", "[::]", ""}


class TrimHistory:
    """The ledgers retention trimmed, per topic: at most ``max_per_topic`` per topic (oldest
    forgotten first) for at most ``max_topics`` topics (least recently trimmed forgotten first)."""

    def __init__(self, max_per_topic: int = 256, max_topics: int = 4096) -> None:
        self._max_per_topic = max(1, max_per_topic)
        self._max_topics = max(1, max_topics)
        self._topics: OrderedDict[str, OrderedDict[int, TrimmedLedger]] = OrderedDict()
        self._seen_checks: dict[str, int] = {}
        # topics with trims not yet persisted (`TrimHistoryStore.persist`); never more keys than
        # _topics holds, since an evicted topic leaves it too
        self._dirty: set[str] = set()

    @staticmethod
    def _key(topic: str) -> str:
        try:
            return topic_of(topic)
        except ValueError:
            return topic

    @property
    def max_per_topic(self) -> int:
        """How many trimmed ledgers are kept per topic."""
        return self._max_per_topic

    @property
    def max_topics(self) -> int:
        """How many topics are remembered."""
        return self._max_topics

    def record(self, topic: str, ledger_ids: Iterable[int], at_ms: int, sizes: Mapping[int, int] | None = None) -> None:
        """Remember that ``ledger_ids`` of ``topic`` were deleted from metadata at ``at_ms``; the
        topic is then due to be persisted (`take_dirty`)."""
        key = self._key(topic)
        self._add(key, [TrimmedLedger(lid, at_ms, (sizes or {}).get(lid)) for lid in ledger_ids])
        if key in self._topics:
            self._dirty.add(key)

    def restore(self, topic: str, trims: Iterable[TrimmedLedger]) -> None:
        """Add trims read back from the metadata store (oldest first); not marked for persisting."""
        self._add(self._key(topic), list(trims))

    def _add(self, key: str, trims: list[TrimmedLedger]) -> None:
        ledgers = self._topics.setdefault(key, OrderedDict())
        self._topics.move_to_end(key)
        for t in trims:
            ledgers[t.ledger_id] = t
            ledgers.move_to_end(t.ledger_id)
        while len(ledgers) > self._max_per_topic:
            ledgers.popitem(last=False)
        while len(self._topics) > self._max_topics:
            old, _ = self._topics.popitem(last=False)
            self._seen_checks.pop(old, None)
            self._dirty.discard(old)

    def take_dirty(self) -> dict[str, list[TrimmedLedger]]:
        """The topics trimmed since the last call with their remembered trims; clears the mark."""
        out = {key: list(self._topics[key].values()) for key in self._dirty if key in self._topics}
        self._dirty.clear()
        return out

    def mark_dirty(self, topics: Iterable[str]) -> None:
        """Mark ``topics`` to be persisted again (after a failed write)."""
        self._dirty.update(k for k in (self._key(t) for t in topics) if k in self._topics)

    def observe_report(self, report: TopicReport) -> int:
        """Record the trim of one retention report unless already seen; returns how many ledgers.
        Installed as a `RetentionService.trim_listeners` entry, so every trim is recorded."""
        if not report.trimmed or self._seen_checks.get(report.topic, -1) >= report.checked_at_ms:
            return 0
        self._seen_checks[report.topic] = report.checked_at_ms
        sizes = {d.ledger_id: d.size for d in report.decision.ledgers} if report.decision else {}
        self.record(report.topic, report.trimmed, report.checked_at_ms, sizes)
        return len(report.trimmed)

    def observe(self, reports: Mapping[str, TopicReport]) -> int:
        """Record the trims of retention reports not seen before; returns how many ledgers."""
        n = sum(self.observe_report(report) for report in reports.values())
        if len(self._seen_checks) > 4 * self._max_topics:  # bound it even for topics never trimmed twice
            self._seen_checks = {t: self._seen_checks[t] for t in self._topics if t in self._seen_checks}
        return n

    def of(self, topic: str) -> list[TrimmedLedger]:
        """The remembered trims of ``topic``, oldest first."""
        return list(self._topics.get(self._key(topic), {}).values())


@functools.cache
def _default_ssl_context() -> ssl.SSLContext:
    # httpx builds a fresh context (loading the CA bundle: milliseconds of CPU) per client; the
    # view opens a client per refresh, so one context is built once and shared
    return ssl.create_default_context()


def _plain_client(timeout: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=timeout, verify=_default_ssl_context())


class BookieGcView:
    """Asks the registered bookies why the space of a topic's ledgers is (not) reclaimed.

    ``store``/``metadata_root`` locate bookies and ledger metadata. ``retention`` (optional) is
    read for trims; they are persisted under ``trim_history_path`` (None: memory only) for
    ``trim_history_max_age_ms``. ``client_factory(timeout_s)`` makes the ``httpx.AsyncClient`` (tests inject a
    transport). Nothing here raises for one bookie or one ledger: failures become statuses.
    """

    def __init__(
        self,
        store: MetadataStore,
        *,
        metadata_root: str = "",
        retention: RetentionService | None = None,
        timeout_s: float = 5.0,
        refresh_interval_s: float = 15.0,
        max_ledgers_per_log: int = 1000,
        max_remembered_ledgers: int = 100_000,
        history: TrimHistory | None = None,
        trim_history_path: str | None = TRIM_HISTORY_PATH,
        trim_history_max_age_ms: int = DEFAULT_MAX_AGE_MS,
        clock: Callable[[], float] = time.time,
        client_factory: Callable[[float], httpx.AsyncClient] | None = None,
    ) -> None:
        self.store = store
        self.root = metadata_root.rstrip("/")
        self.retention = retention
        self.timeout_s = timeout_s
        self.refresh_interval_s = refresh_interval_s
        self.max_ledgers_per_log = max_ledgers_per_log
        self.history = history if history is not None else TrimHistory()
        if retention is not None:
            # the listener's int result is unused; trim_listeners is typed as returning None
            retention.trim_listeners.append(self.history.observe_report)
        self._clock = clock
        self.trim_store = (
            TrimHistoryStore(
                store, self.history, path=trim_history_path, max_age_ms=trim_history_max_age_ms, clock=clock
            )
            if trim_history_path is not None
            else None
        )
        self._loaded = self.trim_store is None
        self._load_lock = trio.Lock()
        self._client_factory = client_factory or _plain_client
        # the client `run` keeps open for its lifetime: making one took ~6 ms of the event loop
        self._client: httpx.AsyncClient | None = None
        self._max_seen = max(1, max_remembered_ledgers)
        # ledger -> bookie -> entry log -> bytes, as last seen in a bookie's index
        self._seen: OrderedDict[int, dict[str, dict[int, int]]] = OrderedDict()
        self._awaiting: int | None = None

    # --- bookies -----------------------------------------------------------------------------

    async def registered_bookies(self) -> dict[str, tuple[str | None, bool]]:
        """bookie id -> (HTTP URL or None, read-only), from the registrations (never raises for
        one bookie; a failed listing gives no bookies of that kind)."""
        base = f"{self.root}/ledgers/available"
        out: dict[str, tuple[str | None, bool]] = {}
        for folder, read_only in ((base, False), (f"{base}/readonly", True)):
            try:
                names = await self.store.children(folder)
            except (NoNodeError, MetadataError):
                continue
            for name in names:
                if name == "readonly" and not read_only:
                    continue
                url = None
                try:
                    data, _ = await self.store.get(f"{folder}/{name}")
                    url = bookie_http_url(data, name)
                    if url:
                        # a bookie id is its advertised host:port (or a name, left as it is)
                        url = _advertised(url, name.rsplit(":", 1)[0] if ":" in name else "")
                except (NoNodeError, MetadataError, ValueError, AttributeError):
                    pass
                out[name] = (url, read_only)
        return out

    async def _ask(self, client: httpx.AsyncClient, bid: str, url: str | None, read_only: bool) -> BookieAnswer:
        if url is None:
            return BookieAnswer(bid, None, error="bookie unreachable: no HTTP URL registered", read_only=read_only)
        error = "bookie unreachable: timed out"
        with trio.move_on_after(self.timeout_s):
            try:
                resp = await client.get(
                    f"{url.rstrip('/')}/api/v1/bookie/gc/explain", params={"max_ledgers": str(self.max_ledgers_per_log)}
                )
                resp.raise_for_status()
                doc = resp.json()
                if not isinstance(doc, dict) or not isinstance(doc.get("logs"), list):
                    raise ValueError("not a GC explain document")
                return BookieAnswer(bid, url, doc, read_only=read_only)
            except Exception as exc:
                error = f"bookie unreachable: {type(exc).__name__}: {exc}"
        return BookieAnswer(bid, url, error=error, read_only=read_only)

    async def ask_bookies(self, extra: Iterable[str] = ()) -> dict[str, BookieAnswer]:
        """Every registered bookie's GC explain (concurrently); ``extra`` ids that are not
        registered are answered as unreachable. Also updates the sightings memory."""
        bookies = await self.registered_bookies()
        answers: dict[str, BookieAnswer] = {
            bid: BookieAnswer(bid, None, error="bookie not registered") for bid in extra if bid not in bookies
        }

        async def ask_all(client: httpx.AsyncClient) -> None:
            async def one(bid: str, url: str | None, ro: bool) -> None:
                answers[bid] = await self._ask(client, bid, url, ro)

            async with trio.open_nursery() as nursery:
                for bid, (url, ro) in bookies.items():
                    nursery.start_soon(one, bid, url, ro)

        if self._client is not None:
            await ask_all(self._client)
        else:
            async with self._client_factory(self.timeout_s) as client:
                await ask_all(client)
        for a in answers.values():
            if a.doc is not None:
                self._remember(a.bookie_id, a.doc)
        return answers

    def _remember(self, bid: str, doc: Mapping[str, Any]) -> None:
        for lid, logs in ledger_sightings(doc).items():
            per = self._seen.setdefault(lid, {})
            # a later sighting replaces the earlier one; logs gone since stay remembered as
            # harmless history (they are ignored once not on disk)
            per[bid] = {**per.get(bid, {}), **logs}
            self._seen.move_to_end(lid)
        while len(self._seen) > self._max_seen:
            self._seen.popitem(last=False)

    # --- the hooks ---------------------------------------------------------------------------

    def observe_trims(self) -> None:
        """Record the retention service's new trims (cheap; called before each use)."""
        if self.retention is not None:
            self.history.observe(self.retention.reports())

    async def load_trims(self) -> None:
        """Read the persisted trim history once (later calls return at once; never raises for a
        store failure: the history then holds only this broker's trims)."""
        if self._loaded or self.trim_store is None:
            return
        async with self._load_lock:
            if not self._loaded:
                with trio.move_on_after(self.timeout_s * 4):
                    n = await self.trim_store.load()
                    log.info("bookie GC view: %d trimmed ledgers remembered from the metadata store", n)
                self._loaded = True

    async def persist_trims(self) -> int:
        """Write the trims recorded since the last call to the metadata store; returns how many
        topics were written (0 without a store)."""
        if self.trim_store is None:
            return 0
        await self.load_trims()  # first, so that a write merges with (never hides) the stored record
        self.observe_trims()
        return await self.trim_store.persist()

    async def explain(self, topic: str, ledger_ids: list[int]) -> dict[str, Any]:
        """The `GcExplainHook`: join ``ledger_ids`` and the topic's remembered trims with the bookies'
        answers (`join_gc_explain`). Raises only on cancellation."""
        await self.load_trims()
        self.observe_trims()
        trimmed = self.history.of(topic)
        ids = list(dict.fromkeys([*ledger_ids, *(t.ledger_id for t in trimmed)]))
        placements = await ledger_placements(self.store, ids, root=self.root)
        ensembles = {b for p in placements.values() for b in p.bookies}
        answers = await self.ask_bookies(ensembles)
        self._update_awaiting(answers)
        return join_gc_explain(
            topic,
            ids,
            placements,
            trimmed,
            answers,
            {lid: self._seen.get(lid, {}) for lid in ids},
            int(self._clock() * 1000),
        )

    def _update_awaiting(self, answers: Mapping[str, BookieAnswer]) -> None:
        docs = [a.doc for a in answers.values() if a.doc is not None]
        if docs or not answers:
            self._awaiting = sum(awaiting_gc_bytes(d) for d in docs)

    async def refresh(self) -> int | None:
        """Ask every bookie now; returns (and caches) the bytes awaiting bookie GC, None when no
        bookie answered."""
        await self.load_trims()
        self.observe_trims()
        self._update_awaiting(await self.ask_bookies())
        return self._awaiting

    def bytes_awaiting_gc(self) -> int | None:
        """The last refreshed sum (for ``BrokerMetrics.gc_pending_hook``); None before the first."""
        return self._awaiting

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Until cancelled: record (and persist) trims twice a second, refresh the bookies'
        numbers every ``refresh_interval_s``. Errors are logged; the loop goes on. When cancelled,
        the last trims are still persisted (shielded, within ``timeout_s``)."""
        task_status.started()
        if self._client_factory is _plain_client:
            # loading the CA bundle held the event loop for 40 - 140 ms on the first refresh
            # (bench/loop_stall_bench.py): do it in a worker thread once
            await trio.to_thread.run_sync(_default_ssl_context)
        next_refresh = 0.0
        async with self._client_factory(self.timeout_s) as client:
            self._client = client
            try:
                while True:
                    self.observe_trims()
                    try:
                        await self.persist_trims()
                    except Exception as exc:
                        log.warning("bookie GC view: persisting trims failed: %s", exc)
                    if trio.current_time() >= next_refresh:
                        next_refresh = trio.current_time() + self.refresh_interval_s
                        try:
                            await self.refresh()
                        except Exception as exc:
                            log.warning("bookie GC view: refresh failed: %s", exc)
                    await trio.sleep(0.5)
            finally:
                self._client = None
                # a trim just before shutdown would otherwise be forgotten by the restarted broker
                with trio.CancelScope(shield=True) as scope:
                    scope.deadline = trio.current_time() + self.timeout_s
                    try:
                        await self.persist_trims()
                    except Exception as exc:
                        log.warning("bookie GC view: persisting trims at shutdown failed: %s", exc)


def _advertised(url: str, host: str) -> str:
    """Replace a wildcard bind address in ``url`` with the bookie's advertised ``host``."""
    parts = urlsplit(url)
    if parts.hostname in _WILDCARDS and host:
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit(parts._replace(netloc=netloc))
    return url
