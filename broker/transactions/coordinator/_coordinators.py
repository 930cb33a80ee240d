"""The transaction coordinators a broker serves, and how a transaction ends (Pulsar's
``TransactionMetadataStoreService``).

Rules:

* Rule 1 (placement): coordinator N is served by the broker that owns partition N of
  ``persistent://pulsar/system/transaction_coordinator_assign`` (`ASSIGN_TOPIC`), so coordinators
  move with bundle ownership; clients find it with a lookup of that partition. Standalone owns
  every partition. A coordinator is loaded (its log replayed: `_store` Rule 3) by the first
  TC_CLIENT_CONNECT for it on its owner; requests for one this broker does not serve fail with
  TransactionCoordinatorNotFound. The upkeep loop closes the coordinators whose partition this
  broker no longer owns (the new owner's open of the log fences this one's meanwhile).
* Rule 2 (end): END_TXN moves the transaction to COMMITTING / ABORTING (logged), ends it on every
  produced partition and acknowledged subscription through the `TxnParticipant`, then moves it to
  COMMITTED / ABORTED (logged; the coordinator forgets it). A retried END_TXN of the same action
  finds it COMMITTING / ABORTING and runs the participants again (they are idempotent); the other
  action fails with InvalidTxnStatus. When the participants do not all succeed within
  ``transactionBufferClientOperationTimeoutInMills`` the client gets the error and the coordinator
  keeps retrying in the background (at most one retry task per transaction) until they do. A
  topic that does not exist has nothing of the transaction to end (TopicNotFound counts as done,
  as Pulsar's brokers answer it).
* Rule 3 (timeouts): a transaction still OPEN at its deadline is aborted as by an END_TXN ABORT.
* Rule 4 (recovery): transactions a coordinator recovers in COMMITTING / ABORTING are ended (Rule 2)
  once it is loaded; OPEN ones keep their deadline from their open time.
* Rule 5 (owner): with authorization on, only the role that opened a transaction (or a super user)
  may add to it or end it (`AuthorizationError` otherwise), as in Pulsar.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, Protocol

import trio

from magnetar.common.backoff import Backoff
from managed_ledger import ManagedLedgerError, ManagedLedgerFactory
from protocols.pulsar import TopicName
from protocols.pulsar import pulsar_api_pb2 as pb

from ..._errors import BrokerServiceError, ServiceNotReadyError
from .._host import TxnParticipant
from .._txnid import TxnAction, TxnID
from ._errors import CoordinatorNotFoundError
from ._meta import TxnMeta, TxnStatus
from ._remote import RemoteParticipants
from ._store import TransactionMetadataStore, log_topic, open_store

__all__ = ["TransactionCoordinators", "CoordinatorHost", "ASSIGN_TOPIC", "DEFAULT_MAX_ACTIVE"]

log = logging.getLogger(__name__)

ASSIGN_TOPIC = TopicName.parse("persistent://pulsar/system/transaction_coordinator_assign")
"""Rule 1: partition N of this topic places coordinator N (Pulsar's system topic)."""
DEFAULT_MAX_ACTIVE = 100_000
"""``maxActiveTransactionsPerCoordinator`` 0 ("no limit" in Pulsar) is bounded at this many."""
_LOG_PREFIX = log_topic(0).managed_ledger_name.removesuffix("0")
_UPKEEP_S = 5.0
_TRIM_EVERY = 12  # upkeep rounds between two trims of each log (a minute)


class CoordinatorHost(Protocol):
    """What the coordinators need from the broker."""

    @property
    def factory(self) -> ManagedLedgerFactory:
        """Where the coordinators' logs are opened."""
        ...

    def clock(self) -> float:
        """Seconds since the epoch."""
        ...

    def owns_assign_partition(self, topic: TopicName) -> bool:
        """Whether this broker serves ``topic`` (a partition of `ASSIGN_TOPIC`) now."""
        ...

    async def assign_partitions(self) -> int:
        """How many partitions `ASSIGN_TOPIC` has (0: transactions have no coordinator)."""
        ...

    async def topic_owner_url(self, topic: str) -> str | None:
        """The binary-protocol URL of the broker serving ``topic`` (None: this broker)."""
        ...

    def txn_participant(self) -> TxnParticipant | None:
        """How a transaction ends on its topics (None: this broker has no topic side)."""
        ...


class TransactionCoordinators:
    """Every coordinator this broker serves (module rules). Start `run` in the service's nursery."""

    def __init__(
        self,
        host: CoordinatorHost,
        *,
        max_active: int = 0,
        participant_timeout_s: float = 3.0,
        remote: RemoteParticipants | None = None,
    ) -> None:
        self.host = host
        self.remote = remote  # the topics other brokers serve (None: every topic is this broker's)
        self.max_active = max_active or DEFAULT_MAX_ACTIVE
        self.participant_timeout_s = participant_timeout_s
        self.stores: dict[int, TransactionMetadataStore] = {}
        self._loading: dict[int, trio.Event] = {}
        self._retrying: set[TxnID] = set()
        self._nursery: trio.Nursery | None = None

    def _clock_ms(self) -> int:
        return int(self.host.clock() * 1000)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the coordinators' tasks (timeouts, retries, upkeep, and the read loops of the
        connections to other brokers) until cancelled; closes every coordinator on the way out."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self.remote is not None:  # its connections' read loops
                    await nursery.start(self.remote.run)
                nursery.start_soon(self._upkeep_loop)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            with trio.CancelScope(shield=True):
                for tc_id in list(self.stores):
                    await self._unload(tc_id)
                if self.remote is not None:
                    await self.remote.close()

    # ------------------------------------------------------------------ placement (Rule 1)

    async def connect(self, tc_id: int) -> TransactionMetadataStore:
        """The READY coordinator ``tc_id``, loading it here when this broker owns its partition."""
        while True:
            store = self.stores.get(tc_id)
            if store is not None:
                return store
            loading = self._loading.get(tc_id)
            if loading is None:
                break
            await loading.wait()
        if tc_id < 0 or self._nursery is None or tc_id >= await self.host.assign_partitions():
            raise CoordinatorNotFoundError(f"Transaction coordinator with id {tc_id} not found!")
        if not self.host.owns_assign_partition(ASSIGN_TOPIC.partition_name(tc_id)):
            raise CoordinatorNotFoundError(f"Transaction coordinator with id {tc_id} is not served by this broker")
        event = self._loading[tc_id] = trio.Event()
        try:
            try:
                store = await open_store(self.host.factory, tc_id, clock_ms=self._clock_ms, max_active=self.max_active)
            except ManagedLedgerError as exc:
                raise ServiceNotReadyError(f"transaction coordinator {tc_id} could not recover its log: {exc}") from exc
            self.stores[tc_id] = store
            self._nursery.start_soon(store.run_timeouts, self._abort_timed_out, self._nursery)
            for meta in list(store.txns.values()):  # Rule 4
                if meta.status in (TxnStatus.COMMITTING, TxnStatus.ABORTING):
                    action = TxnAction.COMMIT if meta.status == TxnStatus.COMMITTING else TxnAction.ABORT
                    self._retry_later(store, meta, action)
            log.info("serving transaction coordinator %d", tc_id)
            return store
        finally:
            del self._loading[tc_id]
            event.set()

    def store_of(self, txn: TxnID) -> TransactionMetadataStore:
        """The coordinator of ``txn`` (its most significant bits), if this broker serves it."""
        store = self.stores.get(txn.most_bits)
        if store is None:
            raise CoordinatorNotFoundError(f"Transaction coordinator with id {txn.most_bits} not found!")
        return store

    def holds_log(self, ml_name: str) -> bool:
        """Whether ``ml_name`` is a coordinator's log (never opened by retention: `_store` Rule 4)."""
        return ml_name.startswith(_LOG_PREFIX)

    async def _unload(self, tc_id: int) -> None:
        store = self.stores.pop(tc_id, None)
        if store is not None:
            await store.close()
            log.info("closed transaction coordinator %d", tc_id)

    async def _upkeep_loop(self) -> None:
        rounds = 0
        while True:
            await trio.sleep(_UPKEEP_S)
            rounds += 1
            for tc_id, store in list(self.stores.items()):
                if not self.host.owns_assign_partition(ASSIGN_TOPIC.partition_name(tc_id)):
                    await self._unload(tc_id)
                elif rounds % _TRIM_EVERY == 0:
                    try:
                        await store.trim()
                    except ManagedLedgerError as exc:
                        log.warning("trimming transaction log %d: %s", tc_id, exc)

    # ------------------------------------------------------------------ requests

    async def new_txn(self, tc_id: int, timeout_ms: int, owner: str = "") -> TxnID:
        """Open a transaction on coordinator ``tc_id`` (which must be served here)."""
        store = self.stores.get(tc_id)
        if store is None:
            raise CoordinatorNotFoundError(f"Transaction coordinator with id {tc_id} not found!")
        return (await store.new_txn(timeout_ms, owner)).txn_id

    def _check_owner(self, meta: TxnMeta, role: str | None, is_super: Callable[[str], bool] | None) -> None:
        if role is None or is_super is None or meta.owner in ("", role) or is_super(role):
            return
        raise BrokerServiceError(
            f"Only the owner or a super user may operate on transaction {meta.txn_id}", pb.AuthorizationError
        )

    async def add_partitions(
        self, txn: TxnID, partitions: list[str], role: str | None = None, is_super: Callable[[str], bool] | None = None
    ) -> None:
        """Record topics ``txn`` produced to (Rule 5 checked when ``role`` is given)."""
        store = self.store_of(txn)
        self._check_owner(store.get(txn), role, is_super)
        await store.add_partitions(txn, partitions)

    async def add_subscriptions(
        self,
        txn: TxnID,
        subscriptions: list[tuple[str, str]],
        role: str | None = None,
        is_super: Callable[[str], bool] | None = None,
    ) -> None:
        """Record subscriptions (topic, name) ``txn`` acknowledged on."""
        store = self.store_of(txn)
        self._check_owner(store.get(txn), role, is_super)
        await store.add_subscriptions(txn, subscriptions)

    def get(self, txn: TxnID) -> TxnMeta:
        """The transaction's metadata (CoordinatorNotFound / TransactionNotFound)."""
        return self.store_of(txn).get(txn)

    # ------------------------------------------------------------------ ending (Rules 2 and 3)

    async def end_txn(
        self,
        txn: TxnID,
        action: TxnAction,
        role: str | None = None,
        is_super: Callable[[str], bool] | None = None,
    ) -> None:
        """End ``txn`` as ``action`` says (Rule 2); returns once it is COMMITTED / ABORTED."""
        store = self.store_of(txn)
        meta = store.get(txn)
        self._check_owner(meta, role, is_super)
        ending = TxnStatus.COMMITTING if action == TxnAction.COMMIT else TxnStatus.ABORTING
        async with meta.lock:
            await store.update_status(meta, ending, TxnStatus.OPEN)  # InvalidTxnStatus for the other action
        try:
            with trio.fail_after(self.participant_timeout_s):
                await self._finish(store, meta, action)
        except trio.TooSlowError:
            self._retry_later(store, meta, action)
            raise ServiceNotReadyError(
                f"transaction {txn}: its topics did not all end it within {self.participant_timeout_s:g} s; "
                "the coordinator keeps trying"
            ) from None

    async def _finish(self, store: TransactionMetadataStore, meta: TxnMeta, action: TxnAction) -> None:
        """End ``meta`` on its participants, retrying failures, then log its final status."""
        backoff = Backoff(0.1, 2.0, jitter=0.1)
        while True:
            try:
                await self._end_on_participants(meta, action)
                break
            except (BrokerServiceError, ManagedLedgerError) as exc:
                log.info("transaction %s: ending it on its topics failed (%s); retrying", meta.txn_id, exc)
                await trio.sleep(backoff.next())
        final = TxnStatus.COMMITTED if action == TxnAction.COMMIT else TxnStatus.ABORTED
        # every topic has the outcome: record it even if the caller gives up now (its END_TXN timed out)
        with trio.CancelScope(shield=True):
            async with meta.lock:
                if store.txns.get(meta.txn_id) is meta:
                    await store.update_status(meta, final, meta.status)

    async def _end_on_participants(self, meta: TxnMeta, action: TxnAction) -> None:
        if not meta.partitions and not meta.subscriptions:
            return
        errors: list[BaseException] = []

        async def one(topic: str, sub: str | None) -> None:
            try:
                url = await self.host.topic_owner_url(topic)
                if url is not None and self.remote is not None:
                    if sub is None:
                        await self.remote.end_txn_on_partition(url, topic, meta.txn_id, action)
                    else:
                        await self.remote.end_txn_on_subscription(url, topic, sub, meta.txn_id, action)
                    return
                participant = self.host.txn_participant()
                if participant is None:
                    raise ServiceNotReadyError("this broker has no transaction participant to end the transaction on")
                if sub is None:
                    await participant.end_txn_on_partition(topic, meta.txn_id, action)
                else:
                    await participant.end_txn_on_subscription(topic, sub, meta.txn_id, action)
            except BrokerServiceError as exc:
                if exc.code == pb.TopicNotFound:
                    # no such topic (never created, or deleted): nothing of the transaction to settle
                    # there, which Pulsar's brokers answer as a success too
                    log.info("transaction %s: %s does not exist: nothing to end there", meta.txn_id, topic)
                    return
                errors.append(exc)
            except ManagedLedgerError as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            for topic in list(meta.partitions):
                nursery.start_soon(one, topic, None)
            for topic, sub in list(meta.subscriptions):
                nursery.start_soon(one, topic, sub)
        if errors:
            first = errors[0]
            raise first if isinstance(first, BrokerServiceError) else ServiceNotReadyError(str(first))

    def _retry_later(self, store: TransactionMetadataStore, meta: TxnMeta, action: TxnAction) -> None:
        if meta.txn_id in self._retrying or self._nursery is None:
            return
        self._retrying.add(meta.txn_id)

        async def retry() -> None:
            try:
                await self._finish(store, meta, action)
            except (BrokerServiceError, ManagedLedgerError) as exc:
                log.warning("transaction %s: could not record its end: %s", meta.txn_id, exc)
            finally:
                self._retrying.discard(meta.txn_id)

        self._nursery.start_soon(retry)

    async def _abort_timed_out(self, txn: TxnID) -> None:
        """Rule 3 (a task of the coordinators' nursery)."""
        try:
            meta = self.get(txn)
            if meta.status != TxnStatus.OPEN:
                return
            log.info("transaction %s timed out: aborting it", txn)
            await self.end_txn(txn, TxnAction.ABORT)
        except (BrokerServiceError, ManagedLedgerError) as exc:
            log.info("transaction %s timed out; aborting it: %s", txn, exc)

    # ------------------------------------------------------------------ views

    def stats(self) -> dict[int, dict[str, Any]]:
        """Each served coordinator's stats, by id."""
        return {tc_id: store.stats() for tc_id, store in sorted(self.stores.items())}

    def slow(self, older_than_ms: int, tc_id: int | None = None) -> list[TxnMeta]:
        """Transactions open longer than ``older_than_ms`` (of one coordinator, or of all served here)."""
        stores = [self.stores[tc_id]] if tc_id is not None and tc_id in self.stores else []
        if tc_id is None:
            stores = list(self.stores.values())
        return [m for s in stores for m in s.slow(older_than_ms)]

    @staticmethod
    def timeout_ms_of(requested: int) -> int:
        """A NEW_TXN's timeout (the protocol's ``txn_ttl_seconds`` carries milliseconds, as Pulsar's
        clients send it); 0 means none was given."""
        return requested if requested > 0 else math.floor(5 * 60 * 1000)
