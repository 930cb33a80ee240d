"""The chaos run's look at what is stored: the receipts against the bookies' entries and the
ledgers' metadata (`StorageAudit`), and the cursors the metadata store holds (`CursorWatch`).

Both read the metadata store directly: ZooKeeper through kazoo, or standalone's embedded sqlite
database read-only (its process owns the store, but sqlite lets another process read it). Entries
are read from each bookie of an entry's write set with ``bk_client``'s `BookieClient`, as
AutoRecovery reads one replica.

Invariants:

* **quorum**: every receipted entry is stored on at least Qa bookies of its write set (the ensemble
  of the ledger's metadata covering the entry). A bookie that cannot be read (down, timed out) makes
  the entry inconclusive, counted apart, not a violation.
* **two-writers** (the storage half): every receipted entry is within the range its ledger was
  closed at, and its ledger is in its topic's ledger list (retained topics; a topic with default
  retention may have trimmed it). An add acknowledged by a deposed owner after the new owner
  fenced and closed its ledger would be past that range; one on a ledger whose addition to the
  list lost the compare-and-set would be on a ledger the list does not have.
* **cursor**: a cursor's persisted mark-delete position never moves back. `CursorWatch` polls the
  cursor nodes (every subscription of the watched topics, the deduplication cursor included)
  and keeps the highest position each ever had.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlparse

import trio

from bk_client import BKError, BookKeeper, NoSuchEntry, NoSuchLedger
from metadata import open_metadata_store
from protocols.bookkeeper import LedgerLayout, LedgerMetadata, LedgerState, decode_layout, layout_path, ledger_path
from protocols.managed_ledger import CursorInfo, ManagedLedgerInfo
from protocols.pulsar import TopicName

from .checker import Pos, Violation

__all__ = ["MetadataView", "ZkView", "SqliteView", "StorageAudit", "AuditResult", "CursorWatch"]

ML_ROOT = "/managed-ledgers"


class MetadataView(Protocol):
    """Read-only access to the metadata store's nodes (None / [] when absent)."""

    def get(self, path: str) -> bytes | None: ...

    def children(self, path: str) -> list[str]: ...

    def close(self) -> None: ...


class ZkView:
    """A kazoo session on ``zk://host:port/chroot`` (thread-safe; errors while ZooKeeper cannot be
    reached propagate as kazoo's exceptions)."""

    def __init__(self, url: str) -> None:
        from kazoo.client import KazooClient

        parsed = urlparse(url)
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
        self.client = KazooClient(hosts=f"{parsed.netloc}{parsed.path}", timeout=10)
        self.client.start(timeout=30)

    def get(self, path: str) -> bytes | None:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.client.get(path)
        except NoNodeError:
            return None
        return bytes(data)

    def children(self, path: str) -> list[str]:
        from kazoo.exceptions import NoNodeError

        try:
            return sorted(self.client.get_children(path))
        except NoNodeError:
            return []

    def close(self) -> None:
        self.client.stop()
        self.client.close()


class SqliteView:
    """The embedded store's database (``{dir}/metadata.sqlite``), opened read-only."""

    def __init__(self, directory: str) -> None:
        self.db = sqlite3.connect(
            f"file:{directory}/metadata.sqlite?mode=ro", uri=True, check_same_thread=False, timeout=10
        )
        self.lock = threading.Lock()

    def get(self, path: str) -> bytes | None:
        with self.lock:
            row = self.db.execute("SELECT data FROM nodes WHERE path = ?", (path,)).fetchone()
        return None if row is None else bytes(row[0])

    def children(self, path: str) -> list[str]:
        with self.lock:
            rows = self.db.execute("SELECT path FROM nodes WHERE parent = ?", (path,)).fetchall()
        return sorted(r[0].rsplit("/", 1)[1] for r in rows)

    def close(self) -> None:
        self.db.close()


def ml_path(topic: str) -> str:
    return f"{ML_ROOT}/{TopicName.parse(topic).managed_ledger_name}"


@dataclass
class AuditResult:
    """What one audit found: violations, entries checked, entries a bookie could not answer for."""

    violations: list[Violation] = field(default_factory=list)
    entries: int = 0
    inconclusive: int = 0
    notes: list[str] = field(default_factory=list)


class StorageAudit:
    """Receipts against storage (module header). ``retained``: the topics whose ledgers are never
    trimmed (a ledger missing from their list is a violation, not a trim)."""

    def __init__(
        self,
        view: MetadataView,
        retained: set[str],
        read_timeout_s: float = 5.0,
        max_reads: int = 2000,
        budget_s: float = 90.0,
    ) -> None:
        self.view = view
        self.retained = retained
        self.read_timeout_s = read_timeout_s
        self.max_reads = max_reads
        self.budget_s = budget_s
        data = view.get(layout_path(""))
        self.layout = decode_layout(data) if data else LedgerLayout.HIERARCHICAL

    def ledger(self, ledger_id: int) -> LedgerMetadata | None:
        data = self.view.get(ledger_path("", ledger_id, self.layout))
        return LedgerMetadata.decode(data) if data else None

    def ledger_list(self, topic: str) -> set[int] | None:
        data = self.view.get(ml_path(topic))
        return None if data is None else {i.ledger_id for i in ManagedLedgerInfo.decode(data).ledgers}

    def audit(self, receipts: list[tuple[str, str, int, Pos]]) -> AuditResult:
        """Check every receipt (topic, producer, seq, position); reads each entry once."""
        result = AuditResult()
        by_ledger: dict[tuple[str, int], dict[int, list[tuple[str, int]]]] = defaultdict(lambda: defaultdict(list))
        for topic, producer, seq, pos in receipts:
            by_ledger[(topic, pos[0])][pos[1]].append((producer, seq))
        lists: dict[str, set[int] | None] = {}
        reads: list[tuple[str, int, LedgerMetadata, int, list[tuple[str, int]]]] = []
        for (topic, lid), entries in sorted(by_ledger.items()):
            md = self.ledger(lid)
            keys = tuple(k for ks in entries.values() for k in ks)
            if md is None:
                if topic in self.retained:
                    result.violations.append(
                        Violation(
                            "two-writers",
                            topic,
                            "",
                            f"{len(keys)} receipts on ledger {lid}, which has no metadata",
                            keys,
                        )
                    )
                continue
            if topic in self.retained:
                if topic not in lists:
                    lists[topic] = self.ledger_list(topic)
                listed = lists[topic]
                if listed is not None and lid not in listed:
                    result.violations.append(
                        Violation(
                            "two-writers",
                            topic,
                            "",
                            f"{len(keys)} receipts on ledger {lid}, which the topic's ledger "
                            f"list does not hold ({sorted(listed)[-5:]} ...)",
                            keys,
                        )
                    )
            if md.state is LedgerState.CLOSED:
                past = sorted(e for e in entries if e > md.last_entry_id)
                if past:
                    result.violations.append(
                        Violation(
                            "two-writers",
                            topic,
                            "",
                            f"receipts for entries {past[:10]} of ledger {lid}, closed at entry {md.last_entry_id}",
                            tuple(k for e in past for k in entries[e]),
                        )
                    )
            for entry, ks in sorted(entries.items()):
                reads.append((topic, lid, md, entry, ks))
        reads = self._pick(reads)
        result.entries = len(reads)
        if reads:
            trio.run(self._read_all, reads, result)
        return result

    def _pick(
        self, reads: list[tuple[str, int, LedgerMetadata, int, list[tuple[str, int]]]]
    ) -> list[tuple[str, int, LedgerMetadata, int, list[tuple[str, int]]]]:
        # every entry when they are few; else each ledger's first and last receipted entries (where
        # a fence, a close or an ensemble change lands) and an even spread of the rest, up to
        # max_reads (the metadata checks above cover every receipt regardless)
        if len(reads) <= self.max_reads:
            return reads
        by_ledger: dict[int, list[int]] = defaultdict(list)
        for i, r in enumerate(reads):
            by_ledger[r[1]].append(i)
        chosen: set[int] = set()
        for idx in by_ledger.values():
            chosen.update(idx[:2] + idx[-10:])
        rest = [i for i in range(len(reads)) if i not in chosen]
        room = max(0, self.max_reads - len(chosen))
        if rest and room:
            step = max(1, len(rest) // room)
            chosen.update(rest[::step][:room])
        return [reads[i] for i in sorted(chosen)]

    async def _read_all(
        self, reads: list[tuple[str, int, LedgerMetadata, int, list[tuple[str, int]]]], result: AuditResult
    ) -> None:
        limit = trio.Semaphore(32)
        short: dict[tuple[str, int], list[tuple[int, list[tuple[str, int]], str]]] = defaultdict(list)
        done = 0

        async with open_metadata_store("memory://chaos-audit") as store, BookKeeper.open(store) as bk:
            client = bk.bookie_client

            async def has(bookie: str, lid: int, entry: int, md: LedgerMetadata) -> bool | None:
                for _ in range(3):
                    try:
                        with trio.fail_after(self.read_timeout_s):
                            await client.read_entry(bookie, lid, entry, metadata=md)
                        return True
                    except (NoSuchEntry, NoSuchLedger):
                        return False
                    except (BKError, trio.TooSlowError, OSError):
                        await trio.sleep(0.5)
                return None

            async def check(topic: str, lid: int, md: LedgerMetadata, entry: int, ks: list[tuple[str, int]]) -> None:
                nonlocal done
                async with limit:
                    ensemble = md.ensemble_for(entry)
                    writes = [ensemble[(entry + i) % md.ensemble_size] for i in range(md.write_quorum)]
                    answers = [await has(b, lid, entry, md) for b in writes]
                done += 1
                stored = sum(1 for a in answers if a)
                if stored >= md.ack_quorum:
                    return
                if any(a is None for a in answers):
                    result.inconclusive += 1
                    return
                where = ", ".join(f"{b}: {'yes' if a else 'no'}" for b, a in zip(writes, answers, strict=True))
                short[(topic, lid)].append((entry, ks, where))

            # a bound on the whole audit: what it could not read in time is inconclusive
            with trio.move_on_after(self.budget_s) as scope:
                async with trio.open_nursery() as nursery:
                    for r in reads:
                        nursery.start_soon(check, *r)
            if scope.cancelled_caught:
                result.inconclusive += len(reads) - done
                result.notes.append(
                    f"audit stopped after {self.budget_s:g}s with {len(reads) - done} of {len(reads)} entries unread"
                )
        for (topic, lid), items in sorted(short.items()):
            items.sort()
            result.violations.append(
                Violation(
                    "quorum",
                    topic,
                    "",
                    f"{len(items)} receipted entries of ledger {lid} on fewer than Qa bookies "
                    f"(first: entry {items[0][0]}, {items[0][2]})",
                    tuple(k for _, ks, _ in items for k in ks),
                )
            )


class CursorWatch:
    """Polls the persisted cursors of ``topics`` every ``interval_s`` on its own thread; `take`
    returns the regressions found since the last call (module header)."""

    def __init__(self, view: MetadataView, topics: list[str], interval_s: float = 0.5) -> None:
        self.view = view
        self.topics = topics
        self.interval_s = interval_s
        self.highest: dict[tuple[str, str], tuple[int, int]] = {}
        self.polls = 0
        self.errors = 0
        self._found: list[Violation] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cursor-watch")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def poll(self) -> None:
        """One look at every cursor (also called by the run after each cycle)."""
        for topic in self.topics:
            base = ml_path(topic)
            for cursor in self.view.children(base):
                data = self.view.get(f"{base}/{cursor}")
                if not data:
                    continue
                try:
                    info = CursorInfo.decode(data)
                except ValueError:
                    continue
                pos = (info.mark_delete.ledger_id, info.mark_delete.entry_id)
                with self._lock:
                    top = self.highest.get((topic, cursor))
                    if top is not None and pos < top:
                        self._found.append(
                            Violation(
                                "cursor",
                                topic,
                                cursor,
                                f"persisted mark-delete position moved back from "
                                f"{top[0]}:{top[1]} to {pos[0]}:{pos[1]}",
                            )
                        )
                    if top is None or pos > top:
                        self.highest[(topic, cursor)] = pos
        self.polls += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.poll()
            except Exception:
                self.errors += 1  # ZooKeeper cut off or restarting: the next poll tries again

    def take(self) -> list[Violation]:
        with self._lock:
            found, self._found = self._found, []
            return found
