"""The broker service: namespaces, topic loading/unloading, and what lookups answer.

Rules:

* Rule 1: a topic is loaded (its managed ledger opened) on first use by a producer, consumer or
  reader, once per name even under concurrent requests, and unloaded after
  ``topic_unload_idle_s`` without producers or consumers, unless it waits to be deleted for
  inactivity (`broker.housekeeping._inactive_topics`, which deletes it instead).
* Rule 2: a topic may be used only inside an existing namespace (else TopicNotFound naming the
  missing namespace); a topic that does not exist yet is created on first use when
  auto-creation is allowed (broker config ``allowAutoTopicCreation``, overridable per namespace
  with the ``autoTopicCreationOverride`` policy), else TopicNotFound.
* Rule 3: partitions of a partitioned topic always exist; a partitioned topic is auto-created
  by PARTITIONED_METADATA when the auto-creation type is ``partitioned``.
* Rule 4: standalone (``ownership`` None), this broker owns every topic: lookups answer Connect
  to itself. In a multi-broker cluster (``ownership`` set, see `broker.cluster._ownership`) it serves only
  the topics of the bundles it owns: others are refused with ServiceNotReady before any managed
  ledger is opened, and retention never opens a managed ledger of a bundle it does not own.
* Rule 6 (policy changes): a namespace's ``deduplicationEnabled`` (and its replication clusters,
  `broker.replication`) applies to its loaded topics
  at once when changed through this broker's admin API (`apply_namespace_policies`), and within
  ``policy_recheck_interval_s`` when changed elsewhere (another broker, a direct metadata write), as in
  Pulsar; the topics stay loaded and their clients connected.
* Rule 7 (non-persistent): ``non-persistent://`` topics (`NonPersistentTopic`) have no managed
  ledger: they are kept in ``np_topics``, exist while loaded (created on use under Rule 2's
  auto-creation setting, or as partitions of a partitioned topic), and are listed while loaded.
* Rule 8 (deduplication timers, as Pulsar's broker): every ``brokerDeduplicationSnapshotFrequencyInSeconds``
  (0: never) each loaded topic with deduplication checks whether a time-based snapshot is due
  (``brokerDeduplicationSnapshotIntervalSeconds``), and every third of
  ``brokerDeduplicationProducerInactivityTimeoutMinutes`` each forgets the producer names
  inactive for that long (`_dedup` Rules 3 and 4).
* Rule 5 (retention): the service runs a `RetentionService` (unless ``retention_enabled`` is off)
  with policies from the metadata store. It opens stored-but-unloaded topics briefly; a topic is
  never loaded while retention holds its managed ledger open (loading waits for it to close), and
  retention never opens a topic that is loaded or loading, so the two never share an instance.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from managed_ledger import ManagedLedger, ManagedLedgerError, ManagedLedgerFactory
from metadata import MetadataStore, NodeExistsError
from protocols.pulsar import NamespaceName, TopicName
from retention import QuotaAction, QuotaDecision, RetentionService

from ._config import BrokerConfig
from ._dynamic_config import DynamicConfig
from ._errors import NamespaceNotFoundError, ServiceNotReadyError, TopicNotFoundError
from .auth import AuthenticationService, AuthorizationService
from .cluster._broker_client import BrokerClient
from .housekeeping._inactive_topics import InactiveTopics
from .housekeeping._offload import install_offload
from .housekeeping._retention_hooks import StorePoliciesProvider, TopicPolicyStore, TopicQuotaStates, publish_time_of
from .housekeeping._subscription_expiry import SubscriptionExpiry
from .metrics import BrokerMetrics
from .replication import Replication
from .resources._namespaces import NamespaceResources
from .schema._registry import SchemaRegistry
from .topics._dedup import DEDUP_CURSOR, Deduplication
from .topics._nonpersistent import NonPersistentTopic
from .topics._stats import StatsUpdater
from .topics._topic import SYSTEM_CURSORS, Topic
from .topics._topic_limits import refresh_limits, topic_overrides
from .transactions import TxnParticipant
from .transactions.buffer import TopicParticipant
from .transactions.coordinator import ASSIGN_TOPIC, RemoteParticipants, TransactionCoordinators

__all__ = ["BrokerService"]

log = logging.getLogger(__name__)

_QUOTA_RECHECK_S = 1.0


class _RetentionFactoryView:
    """The factory as the retention service sees it, remembering what retention opened itself."""

    def __init__(self, factory: ManagedLedgerFactory) -> None:
        self._factory = factory
        self._opening: set[str] = set()
        self._opened: set[str] = set()

    def get(self, name: str) -> ManagedLedger | None:
        return self._factory.get(name)

    async def list(self, prefix: str = "") -> list[str]:
        return await self._factory.list(prefix)

    async def open(self, name: str) -> ManagedLedger:
        self._opening.add(name)
        try:
            ml = await self._factory.open(name)
        finally:
            self._opening.discard(name)
        # those retention has closed since are gone from the factory: forget them, so the set holds
        # what retention has open now (it closes each topic before the next), not every topic it
        # ever opened
        self._opened = {n for n in self._opened if self._factory.get(n) is not None}
        self._opened.add(name)
        return ml

    def busy(self, name: str) -> bool:
        """Whether retention holds (or is opening) the managed ledger ``name`` right now."""
        if name in self._opening:
            return True
        if name in self._opened:
            if self._factory.get(name) is None:
                self._opened.discard(name)
                return False
            return True
        return False


def broker_id_of(*urls: str) -> str:
    """``host:port`` of the first non-empty URL of ``urls`` (its scheme dropped): how a broker id is
    made from a broker's URLs, admin URLs first."""
    return next((url.split("://", 1)[-1] for url in urls if url), "")


class _CoordinatorHost:
    """The broker as its transaction coordinators see it (`broker.transactions.coordinator.CoordinatorHost`)."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service

    @property
    def factory(self) -> ManagedLedgerFactory:
        return self._service.factory

    def clock(self) -> float:
        return self._service.clock()

    def owns_assign_partition(self, topic: TopicName) -> bool:
        ownership = self._service.ownership
        return ownership is None or bool(ownership.owns_topic(topic))

    def txn_participant(self) -> TxnParticipant | None:
        return self._service.txn_participant

    async def assign_partitions(self) -> int:
        return await self._service.namespaces.get_partitions(ASSIGN_TOPIC)

    async def topic_owner_url(self, topic: str) -> str | None:
        ownership = self._service.ownership
        if ownership is None:
            return None
        name = TopicName.parse(topic)
        if ownership.owns_topic(name):
            return None
        tls = self._service.config.broker_client_tls_enabled
        answer = await ownership.lookup(name, "", False, tls=tls)
        if not answer.redirect:
            return None
        urls = answer.urls
        return str((urls.get("brokerServiceUrlTls") if tls else None) or urls.get("brokerServiceUrl") or "") or None


class BrokerService:
    """Everything the protocol handlers share. Start it with ``await nursery.start(service.run)``.

    ``factory`` is a running `ManagedLedgerFactory`; ``store`` the metadata store. The service
    never closes either (their owner does); `close` unloads every topic.
    """

    async def _read_side_entry(self, ledger_id: int, entry_id: int) -> bytes:
        """One entry of a sealed ledger outside any managed ledger (Apache Pulsar's schema ledgers)."""
        reader = await self.factory.side_ledgers.open(ledger_id)
        try:
            (data,) = await reader.read(entry_id, entry_id)
            return bytes(data)
        finally:
            await reader.close()

    def __init__(
        self,
        factory: ManagedLedgerFactory,
        store: MetadataStore,
        config: BrokerConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self.factory = factory
        self.store = store
        self.config = config or BrokerConfig()
        self.clock = clock
        self.auth = AuthenticationService(self.config)  # raises ConfigError for bad auth keys
        self.namespaces = NamespaceResources(
            store, self.config.cluster_name, self.config.default_number_of_namespace_bundles
        )
        self.schemas = SchemaRegistry(store, self._read_side_entry)
        self.authz = AuthorizationService(self.config, self.namespaces)  # superusers, admins, permissions
        self.broker_client = BrokerClient(self.config)  # calls to the other brokers; ConfigError for bad keys
        self.topics: dict[str, Topic] = {}
        self.np_topics: dict[str, NonPersistentTopic] = {}  # Rule 7
        self._loading: dict[str, trio.Event] = {}
        self._nursery: trio.Nursery | None = None
        # "" when the plain-text port is off (brokerServicePort / webServicePort left empty)
        host, port, web_port = (
            self.config.advertised_address,
            self.config.broker_service_port,
            self.config.web_service_port,
        )
        self.service_url = "" if port is None else f"pulsar://{host}:{port}"
        self.web_service_url = "" if web_port is None else f"http://{host}:{web_port}"
        # the TLS URLs ("" while no TLS port listens); lookups answer with both (brokerServiceUrlTls)
        self.service_url_tls = ""
        self.web_service_url_tls = ""
        # advertisedListeners by name and the one advertised without a listener name (see lookup_urls)
        self.advertised_listeners, self.internal_listener_name = self.config.listeners()
        self.connections: set[Any] = set()
        self.metrics = metrics if metrics is not None else BrokerMetrics(self.config.cluster_name)
        self.metrics.bind(self)
        factory_metrics = getattr(factory, "metrics", None)
        if factory_metrics is not None and getattr(factory_metrics, "registry", None) is not None:
            self.metrics.extra_registries.append(factory_metrics.registry)
        self.topic_policies = TopicPolicyStore(store)
        install_offload(self)  # topics offload by their policies (broker.housekeeping._offload)
        retention_config = self.config.retention_config()
        self.policies = StorePoliciesProvider(self.namespaces, self.topic_policies, retention_config)
        self._retention_view = _RetentionFactoryView(factory)
        self.retention = RetentionService(
            self._retention_view,  # type: ignore[arg-type]
            self.policies,
            clock,
            config=retention_config,
            publish_time_of=publish_time_of,
            owns=self._retention_may_open,
            metrics=self.metrics.retention,
            # as Pulsar, TTL and backlog eviction never move the compaction cursor (its mark-delete
            # is the compaction horizon); it still pins what is not compacted yet
            system_cursors=SYSTEM_CURSORS,
            # hold / reject decisions live on the loaded topics, bounded by them (`_retention_hooks`)
            quota_states=TopicQuotaStates(self.topics),
        )
        self.stats = StatsUpdater(self)  # the rates of every figure, once per stats period
        self.dynamic_config = DynamicConfig(self.config)  # overrides stored by admins, applied in run()
        self.inactive_topics = InactiveTopics(self)  # brokerDeleteInactiveTopics*: a loop in run()
        self.subscription_expiry = SubscriptionExpiry(self)  # subscriptionExpiration*: a loop in run()
        self.replication = Replication(self)  # geo-replication: the replicators of loaded topics
        # transactions (transactionCoordinatorEnabled): the coordinators this broker serves
        self.transactions = TransactionCoordinators(
            _CoordinatorHost(self),
            max_active=self.config.max_active_transactions_per_coordinator,
            participant_timeout_s=self.config.transaction_buffer_client_operation_timeout_ms / 1000,
            remote=RemoteParticipants(self.broker_client.ssl_context, self.broker_client.binary_auth()),
        )
        # multi-broker ownership (broker.cluster._ownership.Ownership); None in standalone (Rule 4)
        self.ownership: Any = None
        self._listening = False  # a protocol port listens (set_port / set_tls_port)
        self._stopping = False
        # the topic side of transactions (`TxnParticipant`): how coordinators, here or on other
        # brokers (END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION), end transactions on its topics
        self.txn_participant: TxnParticipant = TopicParticipant(self)

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Create the default namespace, then own topic tasks and the idle-unload loop until cancelled."""
        await self.namespaces.ensure_namespace(NamespaceName.parse(self.config.default_namespace))
        await self.dynamic_config.refresh(self)
        if self.config.transaction_coordinator_enabled:
            await self._prepare_transactions()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self.config.transaction_coordinator_enabled:
                    await nursery.start(self.transactions.run)
                nursery.start_soon(self._unload_idle_loop)
                nursery.start_soon(self._policy_recheck_loop)
                nursery.start_soon(self.inactive_topics.run)
                nursery.start_soon(self.subscription_expiry.run)
                nursery.start_soon(self._dedup_snapshot_loop)
                nursery.start_soon(self._dedup_purge_loop)
                nursery.start_soon(self.stats.run)
                nursery.start_soon(self.replication.resume)  # broker.replication Rule 4
                if self.config.retention_enabled:
                    await nursery.start(self.retention.run)
                    nursery.start_soon(self._backlog_quota_loop)
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            self._stopping = True
            with trio.CancelScope(shield=True):
                await self.close()

    async def _prepare_transactions(self) -> None:
        """The ``pulsar/system`` namespace, and in standalone the coordinator-assign topic with one
        partition when missing, as Pulsar's standalone creates them (a cluster's comes from
        ``magnetar initialize-cluster-metadata``, 16 partitions by default)."""
        await self.namespaces.ensure_namespace(ASSIGN_TOPIC.namespace_name)
        if self.ownership is None and not await self.namespaces.get_partitions(ASSIGN_TOPIC):
            try:
                await self.namespaces.create_partitioned_topic(ASSIGN_TOPIC, 1)
            except NodeExistsError:
                pass

    @property
    def ready(self) -> bool:
        """Whether the broker can serve clients (REST ``/admin/v2/brokers/ready``): the service runs
        (default namespace created, background loops started), a protocol port listens, and it
        is not stopping."""
        return self._nursery is not None and self._listening and not self._stopping

    def set_port(self, port: int) -> None:
        """Record the port the server really listens on (lookups answer with it)."""
        self._listening = True
        self.service_url = f"pulsar://{self.config.advertised_address}:{port}"

    def set_web_port(self, port: int) -> None:
        """Record the port the admin server really listens on (HTTP lookups answer with it)."""
        self.web_service_url = f"http://{self.config.advertised_address}:{port}"

    def set_tls_port(self, port: int) -> None:
        """Record the TLS port the server really listens on (lookups answer it as brokerServiceUrlTls)."""
        self._listening = True
        self.service_url_tls = f"pulsar+ssl://{self.config.advertised_address}:{port}"

    def set_web_tls_port(self, port: int) -> None:
        """Record the TLS port the admin server really listens on."""
        self.web_service_url_tls = f"https://{self.config.advertised_address}:{port}"

    @property
    def broker_id(self) -> str:
        """Pulsar's broker id (its ``lookupServiceAddress``, a stats document's ``ownerBroker``):
        ``host:port`` of this broker's admin service, the https one when there is no http one,
        else of its binary protocol port ('' before any server listens)."""
        return broker_id_of(self.web_service_url, self.web_service_url_tls, self.service_url, self.service_url_tls)

    def lookup_urls(self, listener_name: str = "") -> dict[str, str]:
        """The URLs a lookup answers with (``brokerServiceUrl``, and ``brokerServiceUrlTls`` when there
        is one). ``listener_name`` (CommandLookupTopic.advertised_listener_name; '' = none, as Pulsar
        treats a blank one): that advertised listener's URLs, and `ServiceNotReadyError` (Pulsar's
        code and message) when this broker has no listener of that name.
        Without it, the internal listener's URLs when advertisedListeners is set, else this broker's
        own (advertisedAddress and the ports it listens on)."""
        name = listener_name.strip() or self.internal_listener_name
        if name:
            listener = self.advertised_listeners.get(name)
            if listener is None:
                raise ServiceNotReadyError(f"the broker do not have {name} listener")
            plain, tls = listener.service_url, listener.service_url_tls
        else:
            plain, tls = self.service_url, self.service_url_tls
        # brokerServiceUrlTls keeps a client that came over pulsar+ssl:// on TLS; with no plain URL
        # the TLS URL is also the only brokerServiceUrl there is
        urls = {"brokerServiceUrl": plain or tls}
        if tls:
            urls["brokerServiceUrlTls"] = tls
        return urls

    # ------------------------------------------------------------------ namespaces and existence

    async def _auto_create_allowed(self, ns: NamespaceName) -> tuple[bool, str, int]:
        policies = await self.namespaces.get_policies(ns)
        if policies is None:
            raise NamespaceNotFoundError(f"namespace {ns} does not exist (create the tenant and namespace first)")
        override = policies.get("autoTopicCreationOverride") or {}
        if override:
            return (
                bool(override.get("allowAutoTopicCreation", False)),
                override.get("topicType", "non-partitioned"),
                int(override.get("defaultNumPartitions", 1)),
            )
        return (
            self.config.allow_auto_topic_creation,
            self.config.allow_auto_topic_creation_type,
            self.config.default_num_partitions,
        )

    async def topic_exists(self, topic: TopicName) -> bool:
        """Whether the (non-partitioned or partition) topic has a managed ledger or is loaded."""
        if str(topic) in self.topics:
            return True
        names = await self.factory.list(topic.managed_ledger_name)
        return topic.managed_ledger_name in names

    async def partitioned_metadata(self, topic: TopicName, *, auto_create: bool = True) -> int:
        """Partitions of ``topic`` (0: not partitioned), per Rules 2, 3 and 7."""
        allowed, kind, default_n = await self._auto_create_allowed(topic.namespace_name)
        if topic.partition >= 0:
            return 0
        n = await self.namespaces.get_partitions(topic)
        if n or not auto_create or not allowed or kind != "partitioned":
            return n
        if (await self.topic_exists(topic)) if topic.persistent else str(topic) in self.np_topics:
            return 0
        try:
            await self.namespaces.create_partitioned_topic(topic, default_n)
        except NodeExistsError:
            pass
        return await self.namespaces.get_partitions(topic)

    async def check_topic(self, topic: TopicName, *, create: bool, admin: bool = False) -> None:
        """Raise `TopicNotFoundError` unless ``topic`` exists or may be created now (Rule 2);
        ``admin`` creation ignores the auto-creation setting."""
        if str(topic) in self.topics or str(topic) in self.np_topics:
            return  # loaded: it exists, and the answer needs no metadata read
        allowed, _kind, _n = await self._auto_create_allowed(topic.namespace_name)
        allowed = allowed or admin
        if topic.partition >= 0:
            n = await self.namespaces.get_partitions(topic.partitioned_topic)
            if n and topic.partition < n:
                return
        elif await self.namespaces.get_partitions(topic):
            raise TopicNotFoundError(f"{topic} is a partitioned topic: use its partitions")
        if topic.persistent and await self.topic_exists(topic):
            return
        if not (create and allowed):
            raise TopicNotFoundError(f"topic {topic} does not exist and auto-creation is disabled")

    # ------------------------------------------------------------------ loading

    async def get_topic(self, topic: TopicName, *, create: bool = True, admin: bool = False) -> Topic:
        """The loaded topic, loading it once (Rule 1); raises TopicNotFound / ServiceNotReady.
        ``admin`` creates a missing topic even when auto-creation is off."""
        key = str(topic)
        while True:
            t = self.topics.get(key)
            if t is not None and not t.closed:
                t.touch()
                return t
            loading = self._loading.get(key)
            if loading is None:
                break
            await loading.wait()
        event = self._loading[key] = trio.Event()
        try:
            await self.check_topic(topic, create=create, admin=admin)
            if self.ownership is not None:
                self.ownership.check_serves(topic)  # Rule 4: before the managed ledger opens
            if self._nursery is None:
                raise ServiceNotReadyError("the broker service is not running")
            with trio.move_on_after(30):
                # a poll, not an Event: busy() also ends when the factory drops the ledger, which signals nothing
                while self._retention_view.busy(topic.managed_ledger_name):  # noqa: ASYNC110
                    await trio.sleep(0.02)  # Rule 5: retention closes it within its check
            if self._retention_view.busy(topic.managed_ledger_name):
                raise ServiceNotReadyError(f"topic {topic} is busy (retention check); retry")
            try:
                ml = await self.factory.open(topic.managed_ledger_name)
            except ManagedLedgerError as exc:
                raise ServiceNotReadyError(f"could not open topic {topic}: {exc}") from exc
            if self.ownership is not None and not self.ownership.owns_topic(topic):
                # the bundle was unloaded (or its session lost) while the ledger opened: give it back
                await ml.close()
                self.ownership.check_serves(topic)
            dedup = None
            if await self.topic_dedup_enabled(topic):
                dedup = self.new_deduplication(topic)
                await dedup.recover(ml, now=self.clock())
            elif DEDUP_CURSOR in getattr(ml, "cursors", {}):
                # deduplication was turned off: its cursor must not pin entries any more
                await ml.delete_cursor(DEDUP_CURSOR)
            t = Topic(self, topic, ml, dedup)
            await refresh_limits(self, t)  # the stored limits apply before any client is attached
            await self._nursery.start(t.run)
            # its replicators' cursors exist before any client is attached (broker.replication Rule 2)
            await self.replication.refresh_quietly(t)
            self.topics[key] = t
            log.info("loaded topic %s", topic)
            return t
        finally:
            del self._loading[key]
            event.set()

    async def get_non_persistent_topic(
        self, topic: TopicName, *, create: bool = True, admin: bool = False
    ) -> NonPersistentTopic:
        """The loaded non-persistent topic, created in memory on first use (Rule 7; existence and
        auto-creation as Rule 2). Raises TopicNotFound / ServiceNotReady."""
        if topic.persistent:
            raise ValueError(f"{topic} is a persistent topic")
        key = str(topic)
        t = self.np_topics.get(key)
        if t is not None and not t.closed:
            t.touch()
            return t
        await self.check_topic(topic, create=create, admin=admin)
        if self.ownership is not None:
            self.ownership.check_serves(topic)  # Rule 4: only the bundle's owner serves it
        if self._nursery is None or self._stopping:
            raise ServiceNotReadyError("the broker service is not running")
        t = self.np_topics.get(key)  # another request created it while this one checked
        if t is None or t.closed:
            fresh = NonPersistentTopic(self, topic)
            await refresh_limits(self, fresh)  # the stored limits apply before any client is attached
            t = self.np_topics.get(key)  # and while the limits were read
            if t is None or t.closed:
                t = self.np_topics[key] = fresh
                log.info("loaded non-persistent topic %s", topic)
        return t

    def loaded_topics(self) -> list[Topic | NonPersistentTopic]:
        """Every loaded topic, persistent and non-persistent (a copy: safe to unload while iterating)."""
        return [*self.topics.values(), *self.np_topics.values()]

    async def get_any_topic(self, topic: TopicName, *, create: bool = True) -> Topic | NonPersistentTopic:
        """`get_topic` or `get_non_persistent_topic`, by the name's domain."""
        if topic.persistent:
            return await self.get_topic(topic, create=create)
        return await self.get_non_persistent_topic(topic, create=create)

    def loading(self) -> list[str]:
        """Names of the topics being loaded right now (their managed ledgers opening)."""
        return list(self._loading)

    # ------------------------------------------------------------------ retention hooks

    def _retention_may_open(self, ml_name: str) -> bool:
        if self.transactions.holds_log(ml_name):
            return False  # a coordinator's log: its coordinator trims it (and another broker may serve it)
        topic = TopicName.from_managed_ledger_name(ml_name)
        key = str(topic)
        if self.ownership is not None and not self.ownership.owns_topic(topic):
            return False  # Rule 4: opening it would fence its owner's managed ledger
        return key not in self.topics and key not in self._loading

    def quota_action(self, topic: TopicName) -> QuotaDecision | None:
        """The backlog-quota decision that holds or rejects producers of ``topic`` now, if any."""
        return self.retention.producer_quota_action(str(topic))

    def quota_holds(self, topic: TopicName | Topic) -> bool:
        """True while producers of ``topic`` are held (``producer_request_hold`` exceeded)."""
        d = self._topic_quota_action(topic) if isinstance(topic, Topic) else self.quota_action(topic)
        return d is not None and d.action is QuotaAction.HOLD_PRODUCERS

    def quota_rejects(self, topic: TopicName | Topic) -> QuotaDecision | None:
        """The exceeded ``producer_exception`` quota of ``topic``, None when producers may go on."""
        d = self._topic_quota_action(topic) if isinstance(topic, Topic) else self.quota_action(topic)
        return d if d is not None and d.action is QuotaAction.REJECT_PRODUCERS else None

    def _topic_quota_action(self, topic: Topic) -> QuotaDecision | None:
        """`quota_action` of a loaded topic's name, asked per SEND. Retention keeps its decisions
        on the loaded topics themselves (`TopicQuotaStates`), and an open loaded topic is the one
        loaded under its name (`unload` takes it out of ``topics`` as it closes it), so an open
        topic with no decisions has none to find: answered without building its name."""
        if not topic.quota_decisions and not topic.closed:
            return None
        return self.quota_action(topic.name)

    async def recheck_quota(self, topic: TopicName) -> None:
        """Evaluate ``topic``'s backlog quota now (at most once a second per loaded topic; the time
        of the last check is kept on the topic, so nothing is remembered for unloaded ones)."""
        key = str(topic)
        loaded = self.topics.get(key)
        if loaded is not None:
            now = time.monotonic()
            if now - loaded.quota_checked_at < _QUOTA_RECHECK_S:
                return
            loaded.quota_checked_at = now
        await self.retention.check_topic(key, ttl=False, quota=True, trim=True)

    async def wait_quota_released(self, topic: Topic) -> bool:
        """Wait (Rule 4 of `Topic`) until ``topic`` is no longer held; False after the hold timeout
        or when the topic closes."""
        with trio.move_on_after(self.config.backlog_quota_hold_timeout_s):
            while not topic.closed:
                await self.recheck_quota(topic.name)
                if not self.quota_holds(topic.name):
                    return True
                await trio.sleep(_QUOTA_RECHECK_S / 2)
        return False

    def new_deduplication(self, topic: TopicName) -> Deduplication:
        """A fresh deduplication state for ``topic`` with this broker's limits (`_dedup`); the
        caller recovers it."""
        return Deduplication(
            self.store,
            topic.managed_ledger_name,
            self.config.deduplication_snapshot_interval_entries,
            max_producers=self.config.deduplication_max_producers,
        )

    async def _dedup_snapshot_loop(self) -> None:
        period = self.config.deduplication_snapshot_frequency_s  # Rule 8
        if period <= 0:
            return
        while True:
            await trio.sleep(period)
            for t in list(self.topics.values()):
                await t.check_deduplication_snapshot()

    async def _dedup_purge_loop(self) -> None:
        period = self.config.deduplication_producer_inactivity_timeout_minutes * 60.0 / 3  # Rule 8
        while True:
            await trio.sleep(period)
            for t in list(self.topics.values()):
                await t.purge_inactive_dedup_producers()

    async def dedup_enabled(self, ns: NamespaceName) -> bool:
        """The namespace's ``deduplicationEnabled`` policy, else the broker default."""
        policies = await self.namespaces.get_policies(ns) or {}
        value = policies.get("deduplicationEnabled")
        return self.config.broker_deduplication_enabled if value is None else bool(value)

    async def _topic_dedup_override(self, topic: TopicName) -> bool | None:
        own = (await topic_overrides(self, topic)).get("deduplicationEnabled")
        return None if own is None else bool(own)

    async def topic_dedup_enabled(self, topic: TopicName) -> bool:
        """The topic's ``deduplicationEnabled`` override, else its namespace's policy, else the default."""
        own = await self._topic_dedup_override(topic)
        return await self.dedup_enabled(topic.namespace_name) if own is None else own

    async def apply_namespace_policies(self, ns: NamespaceName | None = None) -> None:
        """Apply the deduplication policy and the limits (`_topic_limits`) to the loaded topics of
        ``ns`` (all when None; the limits also to the non-persistent ones), Rule 6.
        A topic whose switch fails is logged and retried by the next recheck."""
        enabled: dict[NamespaceName, bool] = {}
        ns_policies: dict[NamespaceName, dict | None] = {}  # one read per namespace per pass
        for t in list(self.topics.values()):
            name = t.name.namespace_name
            if t.closed or (ns is not None and name != ns):
                continue
            if name not in enabled:
                enabled[name] = await self.dedup_enabled(name)
            overrides = await topic_overrides(self, t.name)  # one read for dedup and the limits
            own = overrides.get("deduplicationEnabled")
            try:
                await t.set_deduplication(enabled[name] if own is None else bool(own))
            except Exception as exc:
                log.warning("switching deduplication on %s failed: %s", t.name, exc)
            try:
                if name not in ns_policies:
                    ns_policies[name] = await self.namespaces.get_policies(name)
                await refresh_limits(self, t, ns_policies[name], overrides)
            except Exception as exc:
                log.warning("applying the limits of %s failed: %s", t.name, exc)
            await self.replication.refresh_quietly(t, ns_policies.get(name) or {}, overrides)
        for np in list(self.np_topics.values()):  # no deduplication without storage; the same limits
            name = np.name.namespace_name
            if np.closed or (ns is not None and name != ns):
                continue
            try:
                if name not in ns_policies:
                    ns_policies[name] = await self.namespaces.get_policies(name)
                await refresh_limits(self, np, ns_policies[name])
            except Exception as exc:
                log.warning("applying the limits of %s failed: %s", np.name, exc)

    async def _backlog_quota_loop(self) -> None:
        # Pulsar checks the backlog quotas of its loaded topics every
        # backlogQuotaCheckIntervalInSeconds; retention's passes over every stored topic come only
        # every retentionCheckIntervalInSeconds, usually longer
        while True:
            await trio.sleep(self.config.backlog_quota_check_interval_s)
            for key, topic in list(self.topics.items()):
                if not topic.closed:
                    await self.retention.check_topic(key, ttl=False, quota=True, trim=False)

    async def _policy_recheck_loop(self) -> None:
        while True:
            await trio.sleep(self.config.policy_recheck_interval_s)
            try:
                await self.dynamic_config.refresh(self)
                await self.apply_namespace_policies()
            except Exception as exc:
                log.warning("policy recheck failed: %s", exc)

    async def schema_strategy(self, ns: NamespaceName) -> tuple[str, bool]:
        """The namespace's schema compatibility strategy and whether producers may add versions."""
        policies = await self.namespaces.get_policies(ns) or {}
        strategy = policies.get("schema_compatibility_strategy") or "UNDEFINED"
        if strategy == "UNDEFINED":
            strategy = self.config.schema_compatibility_strategy
        return strategy.upper(), bool(
            policies.get("is_allow_auto_update_schema", self.config.is_allow_auto_update_schema)
        )

    async def unload(self, topic: Topic | NonPersistentTopic) -> None:
        """Close a loaded topic (clients reconnect and load it again)."""
        if self.topics.get(str(topic.name)) is topic:
            del self.topics[str(topic.name)]
        if self.np_topics.get(str(topic.name)) is topic:
            del self.np_topics[str(topic.name)]
        await topic.close()
        log.info("unloaded topic %s", topic.name)

    @asynccontextmanager
    async def hold_loading(self, topic: TopicName) -> AsyncIterator[None]:
        """Keep ``topic`` from loading while the block runs (`get_topic` waits, retention leaves it
        alone), for deleting it; waits first for a load in progress to finish."""
        key = str(topic)
        while (loading := self._loading.get(key)) is not None:
            await loading.wait()
        event = self._loading[key] = trio.Event()
        try:
            yield
        finally:
            del self._loading[key]
            event.set()

    def unload_soon(self, topic: Topic) -> None:
        """`unload` from a context that must not wait (for example a fenced add)."""
        if self._nursery is not None:
            self._nursery.start_soon(self.unload, topic)

    async def _unload_idle_loop(self) -> None:
        while True:
            await trio.sleep(min(30.0, self.config.topic_unload_idle_s / 2))
            now = self.clock()
            for t in self.loaded_topics():
                if t.idle and now - t.last_active >= self.config.topic_unload_idle_s:
                    if isinstance(t, Topic) and await self._awaits_deletion(t):
                        continue  # `_inactive_topics` Rule 6: it is deleted instead
                    await self.unload(t)

    async def _awaits_deletion(self, t: Topic) -> bool:
        try:
            return await self.inactive_topics.awaiting_deletion(t)
        except Exception as exc:  # unreadable policies: unload as before
            log.warning("inactive-topic policies of %s: %s", t.name, exc)
            return False

    async def close(self) -> None:
        """Unload every topic; in a cluster first every owned bundle (deregistered, topics closed,
        ownership released: `broker.cluster._ownership` Rule 4)."""
        if self.ownership is not None:
            with trio.move_on_after(60):
                await self.ownership.shutdown()
        for t in self.loaded_topics():
            try:
                await self.unload(t)
            except Exception as exc:
                log.warning("unloading %s failed: %s", t.name, exc)

    # ------------------------------------------------------------------ listing

    async def topics_of_namespace(self, ns: NamespaceName) -> list[str]:
        """Persistent topics of a namespace (partitions by their ``-partition-N`` names), sorted."""
        if not await self.namespaces.namespace_exists(ns):
            raise NamespaceNotFoundError(f"namespace {ns} does not exist")
        prefix = f"{ns}/persistent/"
        names = {
            str(TopicName.from_managed_ledger_name(n)) for n in await self.factory.list(prefix) if n.startswith(prefix)
        }
        names.update(str(t.name) for t in self.topics.values() if t.name.namespace_name == ns)
        for base, n in (await self.namespaces.list_partitioned_topics(ns)).items():
            parsed = TopicName.parse(base)
            names.update(str(parsed.partition_name(i)) for i in range(n))
        return sorted(names)

    async def non_persistent_topics_of_namespace(self, ns: NamespaceName) -> list[str]:
        """Loaded non-persistent topics of a namespace (Rule 7: they exist only while loaded), and
        the partitions of its partitioned non-persistent topics, sorted."""
        if not await self.namespaces.namespace_exists(ns):
            raise NamespaceNotFoundError(f"namespace {ns} does not exist")
        names = {str(t.name) for t in self.np_topics.values() if t.name.namespace_name == ns and not t.closed}
        for base, n in (await self.namespaces.list_partitioned_topics(ns, domain="non-persistent")).items():
            parsed = TopicName.parse(base)
            names.update(str(parsed.partition_name(i)) for i in range(n))
        return sorted(names)
