"""`TrimHistoryStore`: the broker's record of ledgers retention trimmed, kept in the metadata store
so that explain-storage still explains them after a broker restart.

Layout: one node per topic, ``/admin/storage/trimmed-ledgers/{url-quoted persistent://topic}``,
holding JSON ``{"topic": ..., "trims": [{"ledgerId", "trimmedAtMs", "size"}, ...]}`` (oldest
first). Bounded: at most ``TrimHistory.max_per_topic`` trims per node (the newest), none older
than ``max_age_ms``; nodes whose trims all expired are deleted when the history loads, as are the
nodes of topics beyond ``TrimHistory.max_topics`` (the least recently trimmed).

Writes are compare-and-set on the node's version and merge with what is stored (another broker
that owned the topic before may have written trims this one never saw); a lost race is retried.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING
from urllib.parse import quote

from metadata import BadVersionError, MetadataError, MetadataStore, NodeExistsError, NoNodeError

from ._gc_join import TrimmedLedger

if TYPE_CHECKING:  # _gc_view builds a TrimHistoryStore
    from ._gc_view import TrimHistory

__all__ = ["TRIM_HISTORY_PATH", "TrimHistoryStore", "encode_trims", "decode_trims"]

log = logging.getLogger(__name__)

TRIM_HISTORY_PATH = "/admin/storage/trimmed-ledgers"
DEFAULT_MAX_AGE_MS = 7 * 24 * 3600 * 1000
_CAS_ATTEMPTS = 5


def encode_trims(topic: str, trims: Iterable[TrimmedLedger]) -> bytes:
    """The node value for ``topic``'s trims (pure)."""
    return json.dumps(
        {
            "topic": topic,
            "trims": [{"ledgerId": t.ledger_id, "trimmedAtMs": t.trimmed_at_ms, "size": t.size} for t in trims],
        },
        separators=(",", ":"),
    ).encode()


def decode_trims(data: bytes) -> tuple[str, list[TrimmedLedger]]:
    """``(topic, trims)`` of a node value (pure). Raises `ValueError` on a malformed value."""
    try:
        doc = json.loads(data)
        topic = doc["topic"]
        trims = [
            TrimmedLedger(int(t["ledgerId"]), int(t["trimmedAtMs"]), None if t.get("size") is None else int(t["size"]))
            for t in doc["trims"]
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"not a trim-history record: {exc}") from exc
    if not isinstance(topic, str):
        raise ValueError("not a trim-history record: topic is not a string")
    return topic, trims


def _merge(a: Iterable[TrimmedLedger], b: Iterable[TrimmedLedger], *, limit: int, min_ms: int) -> list[TrimmedLedger]:
    """Union by ledger id (``b`` wins), without expired ones, the newest ``limit``, oldest first."""
    by_id = {t.ledger_id: t for t in a}
    by_id.update({t.ledger_id: t for t in b})
    kept = sorted(
        (t for t in by_id.values() if t.trimmed_at_ms >= min_ms), key=lambda t: (t.trimmed_at_ms, t.ledger_id)
    )
    return kept[-limit:] if limit > 0 else []


class TrimHistoryStore:
    """Loads a `TrimHistory` from the metadata store and persists its new trims (module docstring).

    Nothing here raises for a store failure: `load` and `persist` log it and report what they
    did; topics whose write failed stay marked and are written at the next `persist`.
    """

    def __init__(
        self,
        store: MetadataStore,
        history: TrimHistory,
        *,
        path: str = TRIM_HISTORY_PATH,
        max_age_ms: int = DEFAULT_MAX_AGE_MS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_age_ms <= 0:
            raise ValueError(f"max_age_ms must be positive, got {max_age_ms}")
        self.store = store
        self.history = history
        self.path = path.rstrip("/")
        self.max_age_ms = max_age_ms
        self._clock = clock

    def _node(self, topic: str) -> str:
        return f"{self.path}/{quote(topic, safe='')}"

    def _min_ms(self) -> int:
        return int(self._clock() * 1000) - self.max_age_ms

    async def load(self) -> int:
        """Read every stored topic's trims into the history (the most recently trimmed
        ``max_topics`` topics); delete nodes that expired or exceed the bound. Returns how many
        trims were restored."""
        try:
            names = await self.store.children(self.path)
        except NoNodeError:
            return 0
        except MetadataError as exc:
            log.warning("trim history: cannot list %s: %s", self.path, exc)
            return 0
        min_ms = self._min_ms()
        found: list[tuple[int, str, list[TrimmedLedger], str, int]] = []
        stale: list[tuple[str, int]] = []
        for name in names:
            node = f"{self.path}/{name}"
            try:
                data, stat = await self.store.get(node)
                topic, trims = decode_trims(data)
            except NoNodeError:
                continue
            except (MetadataError, ValueError) as exc:
                log.warning("trim history: skipping %s: %s", node, exc)
                continue
            trims = _merge((), trims, limit=self.history.max_per_topic, min_ms=min_ms)
            if trims:
                found.append((trims[-1].trimmed_at_ms, topic, trims, node, stat.version))
            else:
                stale.append((node, stat.version))
        found.sort(key=lambda f: f[0])
        excess = max(0, len(found) - self.history.max_topics)
        stale += [(node, version) for _, _, _, node, version in found[:excess]]
        restored = 0
        for _, topic, trims, _, _ in found[excess:]:  # oldest first: the newest end up most recent
            self.history.restore(topic, trims)
            restored += len(trims)
        for node, version in stale:
            try:
                await self.store.delete(node, version=version)
            except (NoNodeError, BadVersionError):
                pass  # gone, or rewritten meanwhile by a broker that trimmed it again
            except MetadataError as exc:
                log.warning("trim history: cannot delete %s: %s", node, exc)
        return restored

    async def persist(self) -> int:
        """Write the topics trimmed since the last call (compare-and-set, merged with the stored
        trims). Returns how many topics were written; failed ones are retried next time."""
        written = 0
        failed = []
        for topic, trims in self.history.take_dirty().items():
            try:
                await self._write(topic, trims)
                written += 1
            except MetadataError as exc:
                log.warning("trim history: cannot persist %s: %s", topic, exc)
                failed.append(topic)
        self.history.mark_dirty(failed)
        return written

    async def _write(self, topic: str, trims: list[TrimmedLedger]) -> None:
        node = self._node(topic)
        limit = self.history.max_per_topic
        for _ in range(_CAS_ATTEMPTS):
            try:
                data, stat = await self.store.get(node)
            except NoNodeError:
                value = encode_trims(topic, _merge((), trims, limit=limit, min_ms=self._min_ms()))
                try:
                    await self.store.create(node, value, make_parents=True)
                    return
                except NodeExistsError:
                    continue  # another broker created it first: merge with its record
            try:
                _, stored = decode_trims(data)
            except ValueError as exc:
                log.warning("trim history: replacing the malformed %s: %s", node, exc)
                stored = []
            value = encode_trims(topic, _merge(stored, trims, limit=limit, min_ms=self._min_ms()))
            try:
                await self.store.set(node, value, version=stat.version)
                return
            except (BadVersionError, NoNodeError):
                continue  # changed or deleted since we read it: read again
        raise MetadataError(f"{node}: still changing after {_CAS_ATTEMPTS} compare-and-set attempts")
