"""The under-replication manager: which ledgers lost replicas, who is repairing them, and the
switch that pauses AutoRecovery (BookKeeper's ``LedgerUnderreplicationManager`` over ZooKeeper).

Layout under ``{root}/ledgers/underreplication`` (``base``), as BookKeeper lays it out:

* ``base/ledgers/{a:04x}/{b:04x}/{c:04x}/{d:04x}/urL{id:010d}``: one persistent node per
  under-replicated ledger; the 64-bit id split into four 16-bit hex levels so no node has more
  than 65,536 children. Its data is an ``UnderreplicatedLedgerFormat`` record in protobuf text
  form (``replica: "host:port"`` per missing bookie, ``ctime: <ms>``) - see
  ``encode_ur_record``.
* ``base/locks/urL{id:010d}``: ephemeral; whoever created it is repairing that ledger. It goes
  away with its owner's session, so a dead worker never blocks a ledger for long.
* ``base/disable``: exists while AutoRecovery is disabled (workers stop taking ledgers, the
  auditor postpones audits).
* ``base/lostBookieRecoveryDelay``: optional operator override of the auditor's grace period
  (seconds, ASCII integer).
* ``base/auditorelection/V_{seq}``: the auditor election (see ``autorecovery._auditor``).

Record rules:

* Rule 1: ``mark`` creates the record or merges the new missing bookies into an existing one
  (compare-and-set on its version, retried), so two auditors' marks never lose a bookie.
* Rule 2: a worker holds the ledger's lock while repairing it; ``try_lock`` returns the record
  and its version as read *after* the lock was taken.
* Rule 3: ``mark_replicated(ledger_id, version)`` deletes the record only if it is still at the
  version the worker repaired; if the auditor merged more missing bookies meanwhile, the record
  stays (and is picked up again). The lock is released either way.
* Rule 4: empty hex levels left by deletes are removed best-effort; a concurrent ``mark`` that
  loses its parent in that race retries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

import trio

from bk_client import MetadataStoreError
from metadata import (
    BadVersionError,
    MetadataError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from protocols.bookkeeper import UNDERREPLICATION, ledgers_root

__all__ = [
    "UnderReplicatedLedger",
    "UnderReplicationManager",
    "decode_ur_record",
    "encode_ur_record",
    "ur_ledger_path",
    "ur_lock_path",
    "underreplication_base",
]

log = logging.getLogger(__name__)

_UR_PREFIX = "urL"
_MAX_CAS_ATTEMPTS = 100
_HEX_LEVELS = 4


# ---- paths (pure) ---------------------------------------------------------------------------


def underreplication_base(root: str) -> str:
    """``{root}/ledgers/underreplication``."""
    return f"{ledgers_root(root)}/{UNDERREPLICATION}"


def _check_id(ledger_id: int) -> None:
    if not isinstance(ledger_id, int) or isinstance(ledger_id, bool) or not 0 <= ledger_id < 2**63:
        raise ValueError(f"ledger id {ledger_id!r} is outside 0..2**63-1")


def ur_ledger_path(root: str, ledger_id: int) -> str:
    """The record node of ``ledger_id``: four 16-bit hex levels, then ``urL{id:010d}``.

    ``ValueError`` outside 0..2**63-1.
    """
    _check_id(ledger_id)
    levels = "/".join(f"{(ledger_id >> shift) & 0xFFFF:04x}" for shift in (48, 32, 16, 0))
    return f"{underreplication_base(root)}/ledgers/{levels}/{_UR_PREFIX}{ledger_id:010d}"


def ur_lock_path(root: str, ledger_id: int) -> str:
    """The lock node of ``ledger_id``: ``base/locks/urL{id:010d}``."""
    _check_id(ledger_id)
    return f"{underreplication_base(root)}/locks/{_UR_PREFIX}{ledger_id:010d}"


def _ledger_id_of(name: str) -> int | None:
    digits = name[len(_UR_PREFIX) :]
    # isascii: str.isdigit() also accepts digits such as "²" that int() refuses
    if name.startswith(_UR_PREFIX) and digits.isascii() and digits.isdigit():
        return int(digits)
    return None


def _is_hex_level(name: str) -> bool:
    return len(name) == 4 and all(c in "0123456789abcdef" for c in name)


# ---- record codec (pure) --------------------------------------------------------------------


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _unquote(s: str) -> str:
    if len(s) < 2 or s[0] != '"' or s[-1] != '"':
        raise ValueError(f"expected a quoted string, got {s!r}")
    out, i, body = [], 0, s[1:-1]
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            out.append(body[i + 1])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def encode_ur_record(missing: Iterable[str], ctime_ms: int | None = None) -> bytes:
    """The record's stored form: protobuf text of ``UnderreplicatedLedgerFormat`` (what
    BookKeeper writes), one ``replica`` line per missing bookie (sorted, deduplicated), then
    ``ctime`` when given."""
    lines = [f"replica: {_quote(b)}" for b in sorted(set(missing))]
    if ctime_ms is not None:
        lines.append(f"ctime: {int(ctime_ms)}")
    return ("\n".join(lines) + "\n").encode() if lines else b""


def decode_ur_record(data: bytes) -> tuple[tuple[str, ...], int | None]:
    """(missing bookies sorted, ctime in ms or None) from ``encode_ur_record``'s form.

    Unknown fields are ignored (forward compatibility); ``ValueError`` for malformed text.
    """
    missing: set[str] = set()
    ctime: int | None = None
    for raw in data.decode("utf-8").split("\n"):
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"malformed under-replication record line {raw!r}")
        key, value = key.strip(), value.strip()
        if key == "replica":
            missing.add(_unquote(value))
        elif key == "ctime":
            ctime = int(value)
    return tuple(sorted(missing)), ctime


@dataclass(frozen=True, slots=True)
class UnderReplicatedLedger:
    """One under-replicated ledger: the bookies it lost (as the auditor saw them), when it was
    first marked (ms since the epoch, None if unknown) and the record's version."""

    ledger_id: int
    missing: tuple[str, ...]
    ctime_ms: int | None
    version: int


# ---- the manager ---------------------------------------------------------------------------


class UnderReplicationManager:
    """Marks, locks and clears under-replicated ledgers on a ``metadata.MetadataStore`` (rules in
    the module docstring). ``identity`` is written into lock nodes (who is repairing).

    Store failures surface as ``MetadataStoreError`` (original chained). The manager holds no
    background tasks; it keeps the locks this instance took so ``release_all`` can drop them.
    """

    def __init__(self, store: MetadataStore, root: str = "", *, identity: str = "") -> None:
        self._store = store
        self._root = root.rstrip("/")
        self._identity = identity
        self._base = underreplication_base(self._root)
        self._held: set[int] = set()
        # Woken by every local mark, so workers in this process react without waiting for a poll.
        self._marked = trio.Event()

    @property
    def base(self) -> str:
        """``{root}/ledgers/underreplication``."""
        return self._base

    @property
    def held_locks(self) -> frozenset[int]:
        """Ledgers whose lock this instance holds."""
        return frozenset(self._held)

    # ---- marking ---------------------------------------------------------------------------

    async def mark(self, ledger_id: int, missing: Iterable[str]) -> None:
        """Record that ``ledger_id`` lost the replicas on ``missing`` (rule 1: merged into an
        existing record). ``ValueError`` for an empty ``missing`` or a bad id."""
        new = set(missing)
        if not new:
            raise ValueError("a ledger is under-replicated because at least one bookie is missing")
        path = ur_ledger_path(self._root, ledger_id)
        try:
            for _ in range(_MAX_CAS_ATTEMPTS):
                try:
                    data, stat = await self._store.get(path)
                except NoNodeError:
                    try:
                        await self._store.create(
                            path, encode_ur_record(new, int(time.time() * 1000)), make_parents=True
                        )
                        break
                    except (NodeExistsError, NoNodeError):
                        continue  # created concurrently, or its parent was pruned under us (rule 4)
                old, ctime = decode_ur_record(data)
                if new <= set(old):
                    break
                try:
                    await self._store.set(path, encode_ur_record(new | set(old), ctime), version=stat.version)
                    break
                except (BadVersionError, NoNodeError):
                    continue
            else:
                raise MetadataStoreError(
                    f"marking ledger {ledger_id} under-replicated kept racing", ledger_id=ledger_id
                )
        except MetadataError as exc:
            raise MetadataStoreError(
                f"marking ledger {ledger_id} under-replicated failed: {exc}", ledger_id=ledger_id
            ) from exc
        self._marked.set()
        self._marked = trio.Event()

    async def get(self, ledger_id: int) -> UnderReplicatedLedger | None:
        """The ledger's record, or None when it is not marked."""
        try:
            data, stat = await self._store.get(ur_ledger_path(self._root, ledger_id))
        except NoNodeError:
            return None
        except MetadataError as exc:
            raise MetadataStoreError(
                f"reading the under-replication record of {ledger_id} failed: {exc}", ledger_id=ledger_id
            ) from exc
        try:
            missing, ctime = decode_ur_record(data)
        except ValueError as exc:
            raise MetadataStoreError(
                f"ledger {ledger_id} has an unreadable under-replication record: {exc}", ledger_id=ledger_id
            ) from exc
        return UnderReplicatedLedger(ledger_id, missing, ctime, stat.version)

    async def _children(self, path: str) -> list[str]:
        try:
            return await self._store.children(path)
        except NoNodeError:
            return []
        except MetadataError as exc:
            raise MetadataStoreError(f"listing {path} failed: {exc}") from exc

    async def iterate(self) -> AsyncIterator[int]:
        """Yield the ids of marked ledgers in increasing order, one child list per level in
        memory. Records added or removed during the walk may or may not be seen."""
        async for lid in self._walk(f"{self._base}/ledgers", 0):
            yield lid

    async def _walk(self, path: str, level: int) -> AsyncIterator[int]:
        names = await self._children(path)
        if level == _HEX_LEVELS:
            for lid in sorted(x for x in map(_ledger_id_of, names) if x is not None):
                yield lid
            return
        for name in sorted(n for n in names if _is_hex_level(n)):
            async for lid in self._walk(f"{path}/{name}", level + 1):
                yield lid

    async def list(self) -> list[int]:
        """Every marked ledger id, sorted (for tools and tests; ``iterate`` for large clusters)."""
        return [lid async for lid in self.iterate()]

    async def is_locked(self, ledger_id: int) -> bool:
        """True while some worker holds the ledger's lock."""
        try:
            return await self._store.exists(ur_lock_path(self._root, ledger_id)) is not None
        except MetadataError as exc:
            raise MetadataStoreError(f"checking the lock of {ledger_id} failed: {exc}", ledger_id=ledger_id) from exc

    # ---- locking ---------------------------------------------------------------------------

    async def try_lock(self, ledger_id: int) -> UnderReplicatedLedger | None:
        """Take the ledger's lock (rule 2) and return its record; None when another worker holds
        the lock or the ledger is no longer marked (the lock is then not kept)."""
        lock = ur_lock_path(self._root, ledger_id)
        data = f"bookieId: {_quote(self._identity)}\n".encode()
        try:
            await self._store.create(lock, data, ephemeral=True, make_parents=True)
        except NodeExistsError:
            return None
        except MetadataError as exc:
            raise MetadataStoreError(f"locking ledger {ledger_id} failed: {exc}", ledger_id=ledger_id) from exc
        self._held.add(ledger_id)
        try:
            record = await self.get(ledger_id)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.release(ledger_id)
            raise
        if record is None:
            await self.release(ledger_id)
        return record

    async def acquire_next(self, skip: Iterable[int] = ()) -> UnderReplicatedLedger | None:
        """Walk the marked ledgers in id order and lock the first one not in ``skip`` whose lock
        is free; None when there is none right now."""
        skipped = set(skip)
        async for lid in self.iterate():
            if lid in skipped or lid in self._held:
                continue
            record = await self.try_lock(lid)
            if record is not None:
                return record
        return None

    async def release(self, ledger_id: int) -> None:
        """Drop the ledger's lock if this instance holds it (the record stays)."""
        if ledger_id not in self._held:
            return
        self._held.discard(ledger_id)
        path = ur_lock_path(self._root, ledger_id)
        try:
            # Our session may have expired and another worker taken the lock since: only delete
            # a lock node this session owns.
            stat = await self._store.exists(path)
            if stat is not None and stat.ephemeral_owner == self._store.session_id:
                await self._store.delete(path, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass
        except MetadataError as exc:
            raise MetadataStoreError(f"releasing the lock of {ledger_id} failed: {exc}", ledger_id=ledger_id) from exc

    async def release_all(self) -> None:
        """Drop every lock this instance holds (shutdown)."""
        for lid in sorted(self._held):
            try:
                await self.release(lid)
            except MetadataStoreError:
                log.warning("could not release the lock of ledger %d", lid, exc_info=True)

    async def mark_replicated(self, ledger_id: int, version: int) -> bool:
        """Rule 3: delete the record if still at ``version``, prune empty levels, release the lock.

        Returns True when the record was deleted (or was already gone), False when it changed
        since ``version`` (more bookies were marked missing; it stays for another pass).
        """
        path = ur_ledger_path(self._root, ledger_id)
        try:
            try:
                await self._store.delete(path, version=version)
                deleted = True
            except NoNodeError:
                deleted = True
            except BadVersionError:
                deleted = False
            if deleted:
                await self._prune(path)
        except MetadataError as exc:
            raise MetadataStoreError(
                f"clearing the record of ledger {ledger_id} failed: {exc}", ledger_id=ledger_id
            ) from exc
        finally:
            with trio.CancelScope(shield=True):
                await self.release(ledger_id)
        return deleted

    async def _prune(self, leaf: str) -> None:
        parts = leaf.split("/")
        for depth in range(len(parts) - 1, len(parts) - 1 - _HEX_LEVELS, -1):
            try:
                await self._store.delete("/".join(parts[:depth]))
            except (NotEmptyError, NoNodeError):
                return

    async def wait_for_mark(self, timeout_s: float) -> None:
        """Return when this instance marks a ledger, or after ``timeout_s`` (marks by other
        processes are seen by polling)."""
        with trio.move_on_after(timeout_s):
            await self._marked.wait()

    # ---- enable / disable -------------------------------------------------------------------

    async def disable(self) -> None:
        """Pause AutoRecovery cluster-wide (idempotent)."""
        try:
            await self._store.create(f"{self._base}/disable", b"", make_parents=True)
        except NodeExistsError:
            pass
        except MetadataError as exc:
            raise MetadataStoreError(f"disabling AutoRecovery failed: {exc}") from exc

    async def enable(self) -> None:
        """Resume AutoRecovery (idempotent)."""
        try:
            await self._store.delete(f"{self._base}/disable")
        except NoNodeError:
            pass
        except MetadataError as exc:
            raise MetadataStoreError(f"enabling AutoRecovery failed: {exc}") from exc

    async def is_enabled(self) -> bool:
        """True unless ``disable`` was called (and not undone)."""
        try:
            return await self._store.exists(f"{self._base}/disable") is None
        except MetadataError as exc:
            raise MetadataStoreError(f"reading the AutoRecovery switch failed: {exc}") from exc

    async def wait_until_enabled(self) -> None:
        """Return at once if enabled, else when ``enable`` is called (by anyone)."""
        path = f"{self._base}/disable"
        try:
            async with self._store.watch_data(path) as events:
                while await self._store.exists(path) is not None:
                    await events.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError) as exc:
            raise MetadataStoreError("the metadata store closed while waiting for AutoRecovery") from exc
        except MetadataError as exc:
            raise MetadataStoreError(f"watching the AutoRecovery switch failed: {exc}") from exc

    # ---- lostBookieRecoveryDelay override ----------------------------------------------------

    async def set_lost_bookie_recovery_delay(self, seconds: int | None) -> None:
        """Override the auditors' grace period cluster-wide (None removes the override)."""
        path = f"{self._base}/lostBookieRecoveryDelay"
        try:
            if seconds is None:
                try:
                    await self._store.delete(path)
                except NoNodeError:
                    pass
                return
            if seconds < 0:
                raise ValueError("lostBookieRecoveryDelay must be >= 0")
            value = str(int(seconds)).encode()
            try:
                await self._store.set(path, value, version=-1)
            except NoNodeError:
                await self._store.create(path, value, make_parents=True)
        except MetadataError as exc:
            raise MetadataStoreError(f"setting lostBookieRecoveryDelay failed: {exc}") from exc

    async def get_lost_bookie_recovery_delay(self) -> int | None:
        """The cluster-wide override in seconds, or None when unset (or unreadable)."""
        try:
            data, _ = await self._store.get(f"{self._base}/lostBookieRecoveryDelay")
        except NoNodeError:
            return None
        except MetadataError as exc:
            raise MetadataStoreError(f"reading lostBookieRecoveryDelay failed: {exc}") from exc
        try:
            return max(0, int(data.decode().strip()))
        except ValueError:
            log.warning("ignoring unreadable lostBookieRecoveryDelay %r", data)
            return None
