"""Executor-side reads of one `PartitionPlan`, through the broker or straight from the bookies.

Both paths yield the same rows for the same plan (see `_rows`), keeping exactly the messages in
``[plan.start, plan.end)``.

* Broker (`read_via_broker`): the official client's blocking Reader from the plan's first
  position, stopping after the plan's last entry. No event loop is involved.
* Bookies (`read_via_bookies`): the BookKeeper client reads the planned entries of each ledger
  from its ensemble; a ledger offloaded to tiered storage whose bookie copy is gone (or that the
  bookies no longer have) is read from the tier instead, where the managed ledger's metadata says
  it went (its driver and location; S3 credentials from the ``s3ManagedLedgerOffloadCredential*``
  options or the executors' AWS default chain). That client is trio-based, so - the one documented
  exception to "no trio in Spark workers" - it runs in ``trio.run`` on a private thread of the Python worker, handing
  chunks of entries to the task through a bounded queue (at most `_QUEUE_CHUNKS` chunks of
  `_CHUNK_ENTRIES` entries in memory). The broker is not involved, except for the tail of the
  ledger being written that the bookies do not yet report as confirmed (their LAC trails the
  broker's by one entry until the next add); that remainder is read through the broker.

Transactions: plans stop at each partition's max read position (`_offsets` Rule 1b), so no open
transaction's message is planned. Through the broker, markers and aborted transactions' messages
are never delivered: a read whose remaining planned entries are only those ends once the broker
says no message is available. From the bookies, markers give no rows but an aborted transaction's
messages are read like any other (the executors do not know which transactions aborted): use the
broker mode on topics written with transactions.

Data loss during a read (retention deleted planned entries after planning): with
``fail_on_data_loss`` the read raises `DataLossError`; otherwise a warning is logged and the read
continues from what is still stored.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ._decode import ValueSchema
from ._offsets import PartitionPlan, Position, Segment
from ._rows import Row, message_id_bytes, rows_from_entry
from ._security import ClientSecurity

if TYPE_CHECKING:
    from bk_client import ClientConfig  # loaded on workers only when reading from bookies

__all__ = ["DataLossError", "ReadConfig", "read_plan", "read_via_bookies", "read_via_broker"]

log = logging.getLogger("sinks.spark")

_CHUNK_ENTRIES = 256
_QUEUE_CHUNKS = 4


class DataLossError(RuntimeError):
    """Planned messages were not found (deleted by retention, or the topic was removed)."""


@dataclass(frozen=True)
class ReadConfig:
    """How executors read: picklable plain values only."""

    service_url: str
    read_mode: str = "broker"  # or "bookies"
    metadata_url: str = ""
    metadata_root: str = ""
    fail_on_data_loss: bool = True
    read_timeout_ms: int = 30_000
    value_schema: ValueSchema | None = None  # decoded columns (see `_decode`), None: raw ``value``
    ledger_password: str = ""  # the brokers' managedLedgerPassword (readMode=bookies); '' is also tried
    security: ClientSecurity = ClientSecurity()  # TLS and authentication of the client (see `_security`)
    bookkeeper_options: tuple[tuple[str, str], ...] = ()  # BookKeeper client keys (TLS to bookies)
    zk_credentials: str = ""  # ZooKeeper digest user:password of the cluster ('' : none)
    client_kwargs: tuple[tuple[str, Any], ...] = ()  # pulsar.client.* (see `_passthrough`)
    reader_kwargs: tuple[tuple[str, Any], ...] = ()  # pulsar.reader.*
    offload_credentials: tuple[str, str] = ("", "")  # S3 id / secret for offloaded ledgers (readMode=bookies)

    def new_client(self) -> Any:
        """An official client with this config's security and ``pulsar.client.*`` settings."""
        import pulsar

        kwargs: dict[str, Any] = {
            "operation_timeout_seconds": max(1, self.read_timeout_ms // 1000),
            **self.security.pulsar_client_kwargs(),
            **dict(self.client_kwargs),
        }
        return pulsar.Client(self.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn), **kwargs)


def _partition_of(topic: str) -> int:
    _head, sep, tail = topic.rpartition("-partition-")
    return int(tail) if sep and tail.isdigit() else -1


def _lost(cfg: ReadConfig, plan: PartitionPlan, detail: str) -> None:
    msg = (
        f"topic {plan.topic}: messages of [{plan.start}, {plan.end}) are no longer stored ({detail}); "
        f"they were deleted after the batch was planned, probably by retention"
    )
    if cfg.fail_on_data_loss:
        raise DataLossError(msg + ". Set failOnDataLoss=false to skip lost messages.")
    log.warning("%s; continuing (failOnDataLoss=false)", msg)


def read_plan(plan: PartitionPlan, cfg: ReadConfig) -> Iterator[Row]:
    """Rows of ``plan`` in position order, by ``cfg.read_mode``."""
    if not plan.segments:
        return iter(())
    if cfg.read_mode == "bookies":
        return read_via_bookies(plan, cfg)
    return read_via_broker(plan, cfg)


def _bounds(plan: PartitionPlan) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    s, e = plan.start, plan.end
    return (s.ledger, s.entry, s.batch), (e.ledger, e.entry, e.batch)


def read_via_broker(plan: PartitionPlan, cfg: ReadConfig) -> Iterator[Row]:
    """Read ``plan`` with the official client's Reader (blocking). Raises `DataLossError` (see
    module doc) and ``TimeoutError`` when the broker does not deliver a planned message in time."""
    import pulsar

    start_t, end_t = _bounds(plan)
    first, last = plan.segments[0], plan.segments[-1]
    first_key, last_key = (first.ledger_id, first.first), (last.ledger_id, last.last)
    partition = _partition_of(plan.topic)
    batch = start_t[2] if start_t[:2] == first_key and start_t[2] > 0 else -1
    client = cfg.new_client()
    try:
        start_id = pulsar.MessageId(partition, first.ledger_id, first.first, batch)
        reader = client.create_reader(
            plan.topic,
            start_id,
            start_message_id_inclusive=True,
            **{"receiver_queue_size": 1000, **dict(cfg.reader_kwargs)},
        )
        seen_first = at_last = False
        while True:
            if at_last and not reader.has_message_available():
                return
            try:
                msg = reader.read_next(cfg.read_timeout_ms)
            except pulsar.Timeout:
                if not reader.has_message_available():
                    # what is left of the plan the broker never delivers: transaction markers and
                    # aborted transactions' messages (the plan stops at the max read position)
                    return
                if not seen_first:
                    _lost(cfg, plan, "the broker delivered nothing from the planned start")
                    return
                raise TimeoutError(
                    f"topic {plan.topic}: no message after {cfg.read_timeout_ms} ms while "
                    f"reading [{plan.start}, {plan.end})"
                ) from None
            mid = msg.message_id()
            key = (mid.ledger_id(), mid.entry_id(), max(mid.batch_index(), 0))
            if not seen_first:
                seen_first = True
                if key[:2] > first_key:
                    _lost(cfg, plan, f"the first stored message is {key[0]}:{key[1]}")
            if key[:2] > last_key or key >= end_t:
                return
            if key[:2] == last_key:
                at_last = True
            if key < start_t:
                continue
            props = msg.properties()
            yield (
                key,
                msg.data(),
                msg.partition_key() or None,
                plan.topic,
                message_id_bytes(key[0], key[1], partition, mid.batch_index()),
                msg.publish_timestamp(),
                msg.event_timestamp() or None,
                dict(props),
            )
    finally:
        client.close()


def read_via_bookies(plan: PartitionPlan, cfg: ReadConfig) -> Iterator[Row]:
    """Read ``plan`` from the bookies (see module doc); the tail beyond the bookies' LAC comes
    from the broker. Raises `DataLossError`, ``ValueError`` for entries it cannot decode (e.g.
    LZ4-compressed: use the broker mode) and the BookKeeper client's errors."""
    if not cfg.metadata_url:
        raise ValueError("readMode=bookies needs the metadata.url option (a zk:// URL the executors can reach)")
    start_t, end_t = _bounds(plan)
    partition = _partition_of(plan.topic)
    items: queue.Queue = queue.Queue(maxsize=_QUEUE_CHUNKS)
    control: dict = {}
    thread = threading.Thread(
        target=_bookie_thread,
        args=(plan.segments, cfg, items, control, plan.topic),
        name=f"magnetar-bookie-read-{plan.topic}",
        daemon=True,
    )
    thread.start()
    expected_first = True
    try:
        while True:
            kind, value = items.get()
            if kind == "error":
                raise value
            if kind == "done":
                return
            if kind == "missing":
                _lost(cfg, plan, f"ledger {value} is gone")
                expected_first = False
                continue
            if kind == "tail":
                ledger, entry = value
                rest = _rest_of_plan(plan, ledger, entry)
                yield from read_via_broker(rest, cfg)
                return
            for e in value:
                if expected_first:
                    expected_first = False
                    if (e.ledger_id, e.entry_id) != (plan.segments[0].ledger_id, plan.segments[0].first):
                        _lost(cfg, plan, f"the first stored entry is {e.ledger_id}:{e.entry_id}")
                for row in rows_from_entry(plan.topic, partition, e.ledger_id, e.entry_id, e.data):
                    if start_t <= row[0] < end_t:
                        yield row
    finally:
        _stop_bookie_thread(control, items, thread)


def _rest_of_plan(plan: PartitionPlan, ledger: int, entry: int) -> PartitionPlan:
    segs = []
    for s in plan.segments:
        if (s.ledger_id, s.last) < (ledger, entry):
            continue
        segs.append(Segment(s.ledger_id, entry, s.last) if s.ledger_id == ledger else s)
    return replace(plan, start=max(plan.start, Position(ledger, entry, 0)), segments=tuple(segs))


def _stop_bookie_thread(control: dict, items: queue.Queue, thread: threading.Thread) -> None:
    import trio

    token, scope = control.get("token"), control.get("scope")
    if thread.is_alive() and token is not None and scope is not None:
        try:
            trio.from_thread.run_sync(scope.cancel, trio_token=token)
        except trio.RunFinishedError:
            pass
    while thread.is_alive():
        try:  # unblock a put waiting for room
            items.get(timeout=0.1)
        except queue.Empty:
            pass
    thread.join(timeout=10)


def _bookie_thread(
    segments: tuple[Segment, ...], cfg: ReadConfig, items: queue.Queue, control: dict, topic: str
) -> None:
    import trio

    try:
        trio.run(_bookie_read, segments, cfg, items, control, topic)
    except BaseException as exc:
        items.put(("error", exc))


def _client_config(factory: type[ClientConfig], cfg: ReadConfig) -> ClientConfig:
    from magnetar.common.config import load_config

    # A Spark worker shares a small machine with the JVM and other tasks: allow slow answers
    # rather than failing the task (the BookKeeper default is 5 s).
    return load_config(
        factory, None, {"read_entry_timeout_s": max(5.0, cfg.read_timeout_ms / 1000), **dict(cfg.bookkeeper_options)}
    )


class _Tier:
    """The offloaders an executor reads offloaded ledgers with (built on first use)."""

    def __init__(self, cfg: ReadConfig) -> None:
        from tiered_storage import OffloadPolicies, TieredStorage, TieredStorageConfig

        key_id, secret = cfg.offload_credentials
        self.storage = TieredStorage(TieredStorageConfig(read_cache_size_mb=8.0))
        self.policies = OffloadPolicies(
            {
                "s3ManagedLedgerOffloadCredentialId": key_id or None,
                "s3ManagedLedgerOffloadCredentialSecret": secret or None,
            }
        )


async def _offloaded_ledgers(store: Any, topic: str) -> dict[int, Any]:
    """The topic's ledgers whose tier copy is complete, by id (from the managed ledger's metadata)."""
    from metadata import NoNodeError
    from protocols.managed_ledger import ManagedLedgerInfo
    from protocols.pulsar import TopicName

    try:
        value, _ = await store.get(f"/managed-ledgers/{TopicName.parse(topic).managed_ledger_name}")
    except NoNodeError:
        return {}
    return {i.ledger_id: i.offload for i in ManagedLedgerInfo.decode(value).ledgers if i.offloaded}


async def _read_tier(tier: _Tier, seg: Segment, ctx: Any, put: Any) -> None:
    from bk_client import LedgerEntry

    offloader = tier.storage.offloader_for_ledger(ctx.driver, ctx.driver_metadata, tier.policies)
    ledger = await offloader.open(seg.ledger_id, ctx.uid)
    entry = seg.first
    while entry <= seg.last:
        got = await ledger.read(entry, min(seg.last, entry + _CHUNK_ENTRIES - 1))
        if not got:
            await put(("missing", seg.ledger_id))
            return
        await put(("entries", [LedgerEntry(seg.ledger_id, eid, data) for eid, data in got]))
        entry = got[-1][0] + 1


async def _bookie_read(
    segments: tuple[Segment, ...], cfg: ReadConfig, items: queue.Queue, control: dict, topic: str = ""
) -> None:
    import trio

    from bk_client import BookKeeper, ClientConfig, NoSuchEntry, NoSuchLedger, Unauthorized
    from metadata import ZkSecurity, open_metadata_store

    async def put(item: tuple) -> None:
        await trio.to_thread.run_sync(items.put, item, abandon_on_cancel=True)

    control["token"] = trio.lowlevel.current_trio_token()
    with trio.CancelScope() as scope:
        control["scope"] = scope
        config = _client_config(ClientConfig, cfg)
        security = ZkSecurity(cfg.zk_credentials) if cfg.zk_credentials else None
        async with (
            open_metadata_store(cfg.metadata_url, security=security) as store,
            BookKeeper.open(store, root=cfg.metadata_root, config=config) as bk,
        ):
            offloaded = await _offloaded_ledgers(store, topic)
            tier = _Tier(cfg) if offloaded else None
            for seg in segments:
                ctx = offloaded.get(seg.ledger_id)
                if ctx is not None and ctx.bookkeeper_deleted and tier is not None:
                    await _read_tier(tier, seg, ctx, put)
                    continue
                try:
                    try:
                        handle = await bk.open_ledger(
                            seg.ledger_id, password=cfg.ledger_password.encode(), recovery=False
                        )
                    except Unauthorized:
                        if not cfg.ledger_password:
                            raise
                        # a ledger written before managedLedgerPassword was set
                        handle = await bk.open_ledger(seg.ledger_id, recovery=False)
                except NoSuchLedger:
                    if ctx is not None and tier is not None:  # its bookie copy went after we looked
                        await _read_tier(tier, seg, ctx, put)
                    else:
                        await put(("missing", seg.ledger_id))
                    continue
                try:
                    entry = seg.first
                    while entry <= seg.last:
                        hi = min(seg.last, entry + _CHUNK_ENTRIES - 1)
                        try:
                            got = await handle.read(entry, hi)
                        except NoSuchEntry:
                            lac = handle.last_add_confirmed
                            if lac < entry:
                                await put(("tail", (seg.ledger_id, entry)))
                                return
                            got = await handle.read(entry, lac)
                        await put(("entries", got))
                        entry = got[-1].entry_id + 1
                finally:
                    await handle.close()
        await put(("done", None))
