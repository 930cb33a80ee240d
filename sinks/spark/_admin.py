"""A small blocking client of Magnetar's admin REST API (Pulsar v2 paths), for the Spark driver.

Blocking on purpose: Spark calls the source from plain threads, and no event loop may run there.
The calls go through `magnetar.common.admin_client` (redirects to a bundle's owner followed with
the credentials); every failure raises its `AdminError` with the HTTP status (0 when unreachable)
and the broker's reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from magnetar.common import admin_client
from magnetar.common.admin_client import AdminError
from protocols.pulsar import TopicName

from ._offsets import LedgerSpan, Position, cap_at_max_read
from ._security import ClientSecurity

__all__ = ["AdminClient", "AdminError", "TopicStats", "persistent_topic"]


def persistent_topic(topic: str) -> TopicName:
    """``topic`` in any form Pulsar accepts (``t``, ``tenant/ns/t``, ``persistent://tenant/ns/t``),
    parsed; `ValueError` unless it names a persistent topic."""
    name = TopicName.parse(topic)
    if not name.persistent:
        raise ValueError(f"topic {topic!r}: only persistent topics can be read")
    return name


@dataclass(frozen=True)
class TopicStats:
    """What the source needs of a partition's internal stats."""

    ledgers: tuple[LedgerSpan, ...]
    last_confirmed: Position | None  # None when nothing was ever written


class AdminClient:
    """Blocking admin REST calls against ``admin_url`` (e.g. ``http://127.0.0.1:8080``, or
    ``https://...`` with ``security``'s trusted CA, client certificate and credentials)."""

    def __init__(self, admin_url: str, timeout: float = 30.0, security: ClientSecurity | None = None) -> None:
        self.admin_url = admin_url.rstrip("/")
        self._http = admin_client.AdminClient(
            self.admin_url, timeout_s=timeout, **(security or ClientSecurity()).http_kwargs()
        )

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, *, json: Any = None, ok404: bool = False) -> Any:
        return self._http.call(method, path, json, ok404=ok404)

    @staticmethod
    def _tp(topic: str) -> str:
        t = persistent_topic(topic)
        return f"/admin/v2/persistent/{t.tenant}/{t.namespace}/{t.encoded_local_name}"

    def partitions(self, topic: str) -> int:
        """Partition count of ``topic`` (0: not partitioned, or unknown)."""
        body = self._call("GET", f"{self._tp(topic)}/partitions", ok404=True)
        return int(body.get("partitions", 0)) if body else 0

    def expand(self, topic: str) -> list[str]:
        """The partitions of ``topic`` (``...-partition-N``), or ``[topic]`` when not partitioned."""
        full = TopicName.parse(topic)
        n = self.partitions(str(full))
        return [str(full.partition_name(i)) for i in range(n)] if n else [str(full)]

    def list_topics(self, tenant: str, namespace: str) -> list[str]:
        """Every topic of the namespace, partitioned ones both as partitions and as names."""
        base = f"/admin/v2/persistent/{tenant}/{namespace}"
        plain = self._call("GET", base, ok404=True) or []
        partitioned = self._call("GET", f"{base}/partitioned", ok404=True) or []
        return sorted(set(plain) | set(partitioned))

    def topic_stats(self, topic: str) -> TopicStats:
        """The ledger list of one (non-partitioned) topic; empty when it does not exist."""
        body = self._call("GET", f"{self._tp(topic)}/internalStats", ok404=True)
        if not body:
            return TopicStats((), None)
        ledgers = tuple(LedgerSpan(int(x["ledgerId"]), int(x["entries"]), int(x["size"])) for x in body["ledgers"])
        lac = None
        text = str(body.get("lastConfirmedEntry", ""))
        if ":" in text:
            ledger, entry = (int(v) for v in text.split(":", 1))
            lac = Position(ledger, entry, 0) if entry >= 0 else None
        if lac is not None and ledgers and ledgers[-1].ledger_id == lac.ledger:
            # the current ledger's count can run ahead of what is confirmed; trust the LAC
            last = ledgers[-1]
            confirmed = LedgerSpan(last.ledger_id, min(last.entries, lac.entry + 1), last.size)
            ledgers = (*ledgers[:-1], confirmed)
        max_read = self.max_read_position(topic)
        if max_read is not None and lac is not None and max_read < (lac.ledger, lac.entry):
            # entries behind an open transaction are not readable yet (`_offsets` Rule 1b)
            ledgers = cap_at_max_read(ledgers, max_read)
            if max_read[1] >= 0:
                lac = Position(max_read[0], max_read[1], 0)
        return TopicStats(ledgers, lac)

    def max_read_position(self, topic: str) -> tuple[int, int] | None:
        """The partition's max read position ``(ledger, entry)`` from its transaction buffer's
        stats; None when the broker tells none (no such endpoint, transactions off)."""
        t = persistent_topic(topic)
        path = f"/admin/v3/transactions/transactionBufferStats/{t.tenant}/{t.namespace}/{t.encoded_local_name}"
        try:
            body = self._call("GET", path, ok404=True)
        except AdminError:
            return None
        text = str((body or {}).get("maxReadPosition", ""))
        try:
            ledger, entry = (int(v) for v in text.split(":", 1))
        except ValueError:
            return None
        return ledger, entry

    def retention(self, topic: str) -> str:
        """A human description of the retention policy applying to ``topic`` (for error messages)."""
        t = persistent_topic(topic)
        tenant, ns = t.tenant, t.namespace
        parts = []
        for where, path in (
            ("topic", f"{self._tp(str(t.partitioned_topic))}/retention"),
            ("namespace", f"/admin/v2/namespaces/{tenant}/{ns}/retention"),
        ):
            try:
                body = self._call("GET", path, ok404=True)
            except AdminError:
                body = None
            if body:
                parts.append(f"{where} retention {body}")
        if parts:
            return "; ".join(parts)
        return f"no retention policy set on {tenant}/{ns} (the broker default applies)"

    def exists(self, topic: str) -> bool:
        """Whether ``topic`` exists: a partitioned topic, or a topic (or partition) with stats."""
        if self.partitions(topic) > 0:
            return True
        return self._call("GET", f"{self._tp(topic)}/internalStats", ok404=True) is not None

    def subscriptions(self, topic: str) -> list[str]:
        """The subscriptions of ``topic`` (every partition's, for a partitioned topic)."""
        return list(self._call("GET", f"{self._tp(topic)}/subscriptions", ok404=True) or [])

    def subscription_properties(self, topic: str, subscription: str) -> dict[str, str] | None:
        """The subscription's properties; None when it does not exist."""
        body = self._call(
            "GET", f"{self._tp(topic)}/subscription/{quote(subscription, safe='')}/properties", ok404=True
        )
        return None if body is None else {str(k): str(v) for k, v in body.items()}

    def set_subscription_properties(self, topic: str, subscription: str, properties: dict[str, str]) -> None:
        """Replace the subscription's properties."""
        self._call("PUT", f"{self._tp(topic)}/subscription/{quote(subscription, safe='')}/properties", json=properties)

    def delete_subscription(self, topic: str, subscription: str) -> bool:
        """Delete the subscription (forcing its consumers off); False when it was not there."""
        try:
            self._call("DELETE", f"{self._tp(topic)}/subscription/{quote(subscription, safe='')}?force=true")
        except AdminError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def tenants(self) -> list[str]:
        """Every tenant."""
        return list(self._call("GET", "/admin/v2/tenants") or [])

    def namespaces(self, tenant: str) -> list[str]:
        """Every namespace of ``tenant`` (as ``tenant/ns``)."""
        return list(self._call("GET", f"/admin/v2/namespaces/{tenant}", ok404=True) or [])

    def create_subscription(
        self, topic: str, subscription: str, start: Position | None, properties: dict[str, str] | None = None
    ) -> bool:
        """Create a durable subscription at ``start`` (None: earliest) with ``properties``; False if
        it already exists."""
        body: dict[str, Any] = (
            {"ledgerId": -1, "entryId": -1} if start is None else {"ledgerId": start.ledger, "entryId": start.entry}
        )
        if properties:
            body["properties"] = properties
        try:
            self._call("PUT", f"{self._tp(topic)}/subscription/{quote(subscription, safe='')}", json=body)
        except AdminError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def reset_cursor(self, topic: str, subscription: str, position: Position) -> None:
        """Move the subscription's cursor so that ``position`` is the next message to deliver."""
        self._call(
            "POST",
            f"{self._tp(topic)}/subscription/{quote(subscription, safe='')}/resetcursor",
            json={"ledgerId": position.ledger, "entryId": position.entry},
        )

    def schema(self, topic: str) -> dict[str, Any] | None:
        """The latest schema of ``topic`` (Pulsar's GetSchemaResponse JSON), None when it has none."""
        t = persistent_topic(topic)
        return self._call(
            "GET", f"/admin/v2/schemas/{t.tenant}/{t.namespace}/{t.encoded_local_name}/schema", ok404=True
        )

    def set_deduplication(self, namespace: str, enabled: bool = True) -> None:
        """Turn broker deduplication on (or off) for ``tenant/namespace``."""
        self._call("POST", f"/admin/v2/namespaces/{namespace}/deduplication", json=enabled)

    def deduplication(self, namespace: str) -> bool | None:
        """The namespace's deduplication policy (None when not set)."""
        body = self._call("GET", f"/admin/v2/namespaces/{namespace}/deduplication", ok404=True)
        return body if isinstance(body, bool) else None

    def unload(self, topic: str) -> None:
        """Unload ``topic`` (all partitions); clients reconnect and the broker loads it again."""
        self._call("PUT", f"{self._tp(topic)}/unload", ok404=True)
