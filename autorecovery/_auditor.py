"""The auditor: one per cluster (elected), it notices lost bookies and marks the ledgers that had
replicas on them as under-replicated (BookKeeper's ``Auditor`` and ``AuditorElector``).

Election (``AuditorElection``): every candidate creates an ephemeral sequential vote
``{root}/ledgers/underreplication/auditorelection/V_{seq}`` holding ``bookieId: "<identity>"``.
The lowest sequence number is the auditor; every other candidate watches only its predecessor
(no herd effect) and re-checks when that vote goes. A leader that loses its own vote (session
expired) stops auditing and votes again. ``current_auditor`` names the leader.

Auditor rules (``Auditor.run``):

* Rule 1: a bookie is *live* while registered under ``available/`` or ``available/readonly/``
  (a read-only bookie still serves its replicas).
* Rule 2: when a live bookie disappears, its grace period starts; if it comes back before
  ``lost_bookie_recovery_delay_s`` passed (a restart), nothing happens. Once the grace period is
  over, the bookie is *lost*: every ledger with a segment on it is marked under-replicated with
  the lost bookies it has (0 = at once). The operator override
  ``underreplication/lostBookieRecoveryDelay`` wins over the configured delay.
* Rule 3: bookies found in ledger ensembles that were never seen live by this auditor (they
  died before it started) get a grace period starting when the auditor finds them.
* Rule 4: every ``periodic_check_interval_s`` (0 = never) all ledgers are scanned again and any
  ledger still referencing a lost bookie is marked again (marks merge; a repaired ledger no
  longer references it).
* Rule 5: while AutoRecovery is disabled, audits wait; bookie losses are still tracked.

Scans walk the ledger ids range by range (``LedgerManager.iterate_ledger_ids``) and read
metadata in batches of ``scan_batch`` with at most ``read_concurrency`` reads at once.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import trio

from bk_client import LedgerManager, MetadataStoreError, NoSuchLedger
from metadata import MetadataError, MetadataStore, NoNodeError, SessionState, WatchKind
from protocols.bookkeeper import LedgerMetadata

from ._underreplication import UnderReplicationManager, underreplication_base

__all__ = ["Auditor", "AuditorElection", "AuditorStatistics", "current_auditor"]

log = logging.getLogger(__name__)

_VOTE_PREFIX = "V_"
_RETRY_S = 1.0


def _election_path(root: str) -> str:
    return f"{underreplication_base(root.rstrip('/'))}/auditorelection"


def _vote_seq(name: str) -> int:
    tail = name[len(_VOTE_PREFIX) :]
    return int(tail) if tail.isdigit() else -1


def _votes(names: Iterable[str]) -> list[str]:
    return sorted((n for n in names if n.startswith(_VOTE_PREFIX) and _vote_seq(n) >= 0), key=_vote_seq)


def _vote_identity(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    _, _, value = text.partition(":")
    return value.strip().strip('"')


async def current_auditor(store: MetadataStore, root: str = "") -> str | None:
    """The identity of the elected auditor, or None when no candidate is running.

    Raises ``MetadataStoreError``.
    """
    path = _election_path(root)
    try:
        for name in _votes(await store.children(path)):
            try:
                data, _ = await store.get(f"{path}/{name}")
            except MetadataError:
                continue  # that vote just went; the next one is the leader
            return _vote_identity(data)
    except NoNodeError:
        return None
    except MetadataError as exc:
        raise MetadataStoreError(f"reading the auditor election failed: {exc}") from exc
    return None


class AuditorElection:
    """One candidate in the auditor election (see the module docstring).

    ``is_leader`` is True while this candidate's ``lead`` function runs.
    """

    def __init__(self, store: MetadataStore, root: str = "", *, identity: str) -> None:
        self._store = store
        self._path = _election_path(root)
        self._identity = identity
        self.is_leader = False
        self.terms = 0  # how many times this candidate became the leader

    async def run(
        self, lead: Callable[[], Awaitable[None]], *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Vote (``task_status.started()`` once the first vote is cast), wait to be elected, run
        ``lead()`` while leader; vote again if the vote is lost. Runs until cancelled; the vote
        is withdrawn on exit. A ``lead`` that raises, or a store error, is logged and the candidate
        votes again after a pause (another candidate may take over meanwhile). Returns once the
        store's session is closed; raises the store's error if the first vote fails."""
        started = False
        while self._store.session_state is not SessionState.CLOSED:
            try:
                vote = await self._store.create(
                    f"{self._path}/{_VOTE_PREFIX}",
                    f'bookieId: "{self._identity}"\n'.encode(),
                    ephemeral=True,
                    sequential=True,
                    make_parents=True,
                )
            except MetadataError:
                if not started:
                    raise
                log.warning("%s cannot vote for auditor; retrying", self._identity, exc_info=True)
                await trio.sleep(_RETRY_S)
                continue
            failed = False
            try:
                if not started:
                    started = True
                    task_status.started()
                if await self._wait_until_first(vote):
                    failed = not await self._lead(vote, lead)
            except (MetadataError, MetadataStoreError):
                log.warning("%s lost track of the auditor election; voting again", self._identity, exc_info=True)
                failed = True
            finally:
                self.is_leader = False
                with trio.CancelScope(shield=True):
                    try:
                        await self._store.delete(vote)
                    except MetadataError:
                        pass
            if failed:
                await trio.sleep(_RETRY_S)

    async def _wait_until_first(self, vote: str) -> bool:
        """True once ``vote`` is the lowest; False if it vanished (session expired)."""
        mine = vote.rsplit("/", 1)[-1]
        while True:
            votes = _votes(await self._store.children(self._path))
            if mine not in votes:
                return False
            i = votes.index(mine)
            if i == 0:
                return True
            pred = f"{self._path}/{votes[i - 1]}"
            async with self._store.watch_data(pred) as events:
                if await self._store.exists(pred) is None:
                    continue
                async for event in events:
                    if event.kind is WatchKind.DELETED:
                        break
                else:
                    raise MetadataStoreError("the metadata store closed during the auditor election")

    async def _lead(self, vote: str, lead: Callable[[], Awaitable[None]]) -> bool:
        """Run ``lead`` until the vote goes; False when ``lead`` failed."""
        self.is_leader = True
        self.terms += 1
        log.info("%s is the auditor", self._identity)

        async def watch_vote(scope: trio.CancelScope) -> None:
            async with self._store.watch_data(vote) as events:
                if await self._store.exists(vote) is not None:
                    async for event in events:
                        if event.kind is WatchKind.DELETED:
                            break
            scope.cancel()

        async def watch_session(scope: trio.CancelScope) -> None:
            async with self._store.watch_session() as states:
                async for state in states:
                    if state in (SessionState.LOST, SessionState.CLOSED):
                        break
            scope.cancel()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch_vote, nursery.cancel_scope)
                nursery.start_soon(watch_session, nursery.cancel_scope)
                await lead()
                nursery.cancel_scope.cancel()
        except Exception:
            log.exception("the auditor %s failed; voting again", self._identity)
            return False
        return True


@dataclass(frozen=True, slots=True)
class AuditorStatistics:
    """A snapshot of an auditor's counters (totals since it started)."""

    audits: int
    ledgers_marked: int
    lost_bookies: int
    pending_bookies: int
    full_checks: int
    ledgers_checked: int
    audit_time_s: float
    last_audit_time_s: float
    scan_errors: int


class Auditor:
    """Marks the ledgers of lost bookies under-replicated (rules in the module docstring).

    ``run`` owns its tasks (bookie watches, the audit loop); run it in a nursery, or through
    ``AuditorElection`` so only one auditor acts per cluster.
    """

    def __init__(
        self,
        store: MetadataStore,
        root: str = "",
        *,
        lost_bookie_recovery_delay_s: float = 0.0,
        periodic_check_interval_s: float = 604800.0,
        ledgers: LedgerManager | None = None,
        under_replication: UnderReplicationManager | None = None,
        scan_batch: int = 256,
        read_concurrency: int = 16,
    ) -> None:
        if lost_bookie_recovery_delay_s < 0 or periodic_check_interval_s < 0:
            raise ValueError("the grace period and the check interval must be >= 0")
        if scan_batch < 1 or read_concurrency < 1:
            raise ValueError("scan_batch and read_concurrency must be >= 1")
        self._ledgers = ledgers or LedgerManager(store, root)
        self._urm = under_replication or UnderReplicationManager(store, root, identity="auditor")
        self._delay = float(lost_bookie_recovery_delay_s)
        self._interval = float(periodic_check_interval_s)
        self._batch = scan_batch
        self._limiter = trio.CapacityLimiter(read_concurrency)
        self._writable: frozenset[str] = frozenset()
        self._readonly: frozenset[str] = frozenset()
        self._gone_since: dict[str, float] = {}
        self._audited: set[str] = set()
        self._wake = trio.Event()
        self.audit_done = trio.Event()  # set (and replaced) after every audit or full check
        self._stats = {
            "audits": 0,
            "ledgers_marked": 0,
            "lost_bookies": 0,
            "full_checks": 0,
            "ledgers_checked": 0,
            "audit_time_s": 0.0,
            "last_audit_time_s": 0.0,
            "scan_errors": 0,
        }

    # ---- views -----------------------------------------------------------------------------

    @property
    def live_bookies(self) -> frozenset[str]:
        """Registered bookies, writable or read-only (rule 1)."""
        return self._writable | self._readonly

    @property
    def pending_bookies(self) -> frozenset[str]:
        """Bookies gone and not yet audited (in their grace period, or waiting for an audit)."""
        return frozenset(b for b in self._gone_since if b not in self._audited)

    @property
    def lost_bookies(self) -> frozenset[str]:
        """Bookies declared lost (their ledgers were marked) and not back."""
        return frozenset(self._audited)

    def statistics(self) -> AuditorStatistics:
        """Counters for metrics and tests."""
        s = self._stats
        return AuditorStatistics(
            int(s["audits"]),
            int(s["ledgers_marked"]),
            int(s["lost_bookies"]),
            len(self.pending_bookies),
            int(s["full_checks"]),
            int(s["ledgers_checked"]),
            float(s["audit_time_s"]),
            float(s["last_audit_time_s"]),
            int(s["scan_errors"]),
        )

    # ---- bookie tracking ---------------------------------------------------------------------

    def _set_live(self, writable: frozenset[str] | None = None, readonly: frozenset[str] | None = None) -> None:
        before = self.live_bookies
        if writable is not None:
            self._writable = writable
        if readonly is not None:
            self._readonly = readonly
        live = self.live_bookies
        now = trio.current_time()
        for b in before - live:
            self._gone_since.setdefault(b, now)
            log.info("bookie %s is gone; auditing its ledgers after the grace period", b)
        for b in live:
            if self._gone_since.pop(b, None) is not None:
                self._audited.discard(b)
                log.info("bookie %s is back", b)
        self._wake.set()

    async def _follow(self, channel: trio.abc.ReceiveChannel[frozenset[str]], writable: bool) -> None:
        async for snapshot in channel:
            if writable:
                self._set_live(writable=snapshot)
            else:
                self._set_live(readonly=snapshot)

    async def _grace(self) -> float:
        override = await self._urm.get_lost_bookie_recovery_delay()
        return float(override) if override is not None else self._delay

    # ---- the loop ----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Audit until cancelled. ``task_status.started()`` after the first view of the bookies
        and the start-up scan (rule 3). Store errors during audits are logged and retried."""
        async with (
            self._ledgers.watch_bookies(True) as writable,
            self._ledgers.watch_bookies(False) as readonly,
            trio.open_nursery() as nursery,
        ):
            self._set_live(writable=await writable.receive(), readonly=await readonly.receive())
            nursery.start_soon(self._follow, writable, True)
            nursery.start_soon(self._follow, readonly, False)
            next_full = trio.current_time() + self._interval if self._interval > 0 else math.inf
            try:
                await self._scan(set(), full=False)
            except MetadataStoreError:
                self._stats["scan_errors"] += 1
                log.warning("the auditor's start-up scan failed; relying on bookie watches", exc_info=True)
            task_status.started()
            while True:
                self._wake = trio.Event()
                deadline = next_full
                try:
                    if not await self._urm.is_enabled():
                        await self._urm.wait_until_enabled()
                        continue
                    grace = await self._grace()
                    now = trio.current_time()
                    pending = {b: t for b, t in self._gone_since.items() if b not in self._audited}
                    due = {b for b, t in pending.items() if now - t >= grace}
                    if due:
                        await self._audit(due)
                        continue
                    if now >= next_full:
                        await self._full_check(grace)
                        next_full = trio.current_time() + self._interval
                        continue
                    if pending:
                        deadline = min(deadline, min(pending.values()) + grace)
                except MetadataStoreError:
                    self._stats["scan_errors"] += 1
                    log.warning("audit failed; retrying in %ss", _RETRY_S, exc_info=True)
                    deadline = trio.current_time() + _RETRY_S
                with trio.move_on_at(deadline):
                    await self._wake.wait()

    def _finished(self, start: float) -> None:
        took = trio.current_time() - start
        self._stats["audit_time_s"] += took
        self._stats["last_audit_time_s"] = took
        self.audit_done.set()
        self.audit_done = trio.Event()

    async def _audit(self, due: set[str]) -> None:
        start = trio.current_time()
        log.info("auditing lost bookies %s", sorted(due))
        marked = await self._scan(due, full=False)
        self._audited |= due & set(self._gone_since)
        self._stats["audits"] += 1
        self._stats["lost_bookies"] += len(due)
        log.info("marked %d ledgers under-replicated for lost bookies %s", marked, sorted(due))
        self._finished(start)

    async def _full_check(self, grace: float) -> None:
        start = trio.current_time()
        now = trio.current_time()
        lost = {b for b, t in self._gone_since.items() if now - t >= grace}
        await self._scan(lost, full=True)
        self._audited |= lost
        self._stats["full_checks"] += 1
        self._finished(start)

    async def _scan(self, targets: set[str], *, full: bool) -> int:
        """Mark every ledger with a segment on ``targets``; start the grace period of absent
        bookies nobody saw leave (rule 3). Returns how many ledgers were marked."""
        marked = 0
        batch: list[int] = []
        async for lid in self._ledgers.iterate_ledger_ids():
            batch.append(lid)
            if len(batch) >= self._batch:
                marked += await self._scan_batch(batch, targets, full)
                batch = []
        if batch:
            marked += await self._scan_batch(batch, targets, full)
        return marked

    async def _scan_batch(self, ids: list[int], targets: set[str], full: bool) -> int:
        metas: dict[int, LedgerMetadata] = {}
        errors: list[MetadataStoreError] = []

        async def read(lid: int) -> None:
            async with self._limiter:
                try:
                    metas[lid] = (await self._ledgers.read(lid))[0]
                except NoSuchLedger:
                    pass  # deleted during the scan
                except MetadataStoreError as exc:
                    errors.append(exc)

        async with trio.open_nursery() as nursery:
            for lid in ids:
                nursery.start_soon(read, lid)
        if errors:
            raise errors[0]
        marked = 0
        now = trio.current_time()
        live = self.live_bookies
        for lid in ids:
            meta = metas.get(lid)
            if meta is None:
                continue
            bookies = {b for seg in meta.segments for b in seg.ensemble}
            for b in bookies - live:
                self._gone_since.setdefault(b, now)  # rule 3
            hit = bookies & targets
            if hit:
                await self._urm.mark(lid, hit)
                marked += 1
        self._stats["ledgers_marked"] += marked
        if full:
            self._stats["ledgers_checked"] += len(metas)
        return marked
