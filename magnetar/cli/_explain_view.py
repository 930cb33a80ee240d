"""``magnetar admin topics explain-storage`` for a person: the explain-storage JSON (see
``broker/admin/_explain.py``) as sentences and narrow tables, sizes and ages in units.

`lines` is pure (JSON in, printable items out) so the wording is tested without a broker;
`print_explain` prints them on the human console.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import _human as human

__all__ = ["lines", "print_explain"]

_SOURCES = {"broker": "broker default", "namespace": "namespace policy", "topic": "topic policy"}


def _source(policies: Mapping[str, Any], key: str) -> str:
    where = (policies.get("sources") or {}).get(key)
    return f" ({_SOURCES.get(where, where)})" if where else ""


def retention_text(retention: Mapping[str, Any] | None) -> str:
    """Pulsar's retention policy (minutes, MB; -1 unlimited, 0 none) in words."""
    if not retention:
        return "none"
    minutes, mb = retention.get("retentionTimeInMinutes", 0), retention.get("retentionSizeInMB", 0)
    if minutes == 0 and mb == 0:
        return "none: acknowledged messages are deleted"
    if minutes < 0 and mb < 0:
        return "unlimited: acknowledged messages are kept"
    time_part = "no time limit" if minutes < 0 else human.duration(minutes * 60) if minutes else "0s"
    size_part = "no size limit" if mb < 0 else human.size(mb * 1024 * 1024) if mb else "0 B"
    return f"acknowledged messages kept up to {time_part} and {size_part}"


def _quotas(quotas: Mapping[str, Any]) -> str:
    if not quotas:
        return "none"
    parts = []
    for kind, q in quotas.items():
        limits = []
        if q.get("limitSize", -1) >= 0:
            limits.append(human.size(q["limitSize"]))
        if q.get("limitTime", -1) >= 0:
            limits.append(human.duration(q["limitTime"]))
        parts.append(f"{kind} {' / '.join(limits) or 'no limit'}, {q.get('policy')}")
    return "; ".join(parts)


def _compaction(c: Mapping[str, Any] | None) -> str | None:
    if not c:
        return None
    status = c.get("status")
    if status == "NOT_RUN":
        return "not run"
    if status == "RUNNING":
        return "running"
    if status == "ERROR":
        return f"failed: {c.get('lastError') or 'unknown reason'}"
    return f"compacted up to {c.get('horizon')} into ledger {c.get('compactedLedger')}"


def _ids(ids: list[Any]) -> str:
    return ", ".join(str(i) for i in ids) if ids else "none"


def _ledger_rows(ex: Mapping[str, Any]) -> Any:
    table = human.new_table("ledgers", ["ledger", "entries", "size", "age", "decision", "why"])
    for row in ex.get("ledgers") or []:
        age = human.duration(row.get("ageSeconds"))
        if row.get("reason") == "open_ledger":
            age = f"{age} (open)" if age else "open"
        why = row.get("explanation") or str(row.get("reason", "")).replace("_", " ")
        pinned = row.get("pinnedBy") or []
        if pinned and not any(repr(name) in why for name in pinned):
            why += f"; pinned by {', '.join(pinned)}"
        table.add_row(
            *(
                human.cell(v)
                for v in (
                    row.get("ledgerId"),
                    row.get("entries"),
                    human.size(row.get("size")),
                    age,
                    row.get("decision"),
                    why,
                )
            )
        )
    return table


def _cursor_rows(ex: Mapping[str, Any]) -> Any:
    cursors = ex.get("cursors") or {}
    pipelines = any(c.get("pipeline") for c in cursors.values())
    table = human.new_table(
        "subscriptions (cursors)",
        ["name", *(["pipeline"] if pipelines else []), "mark-delete", "backlog", "backlog size", "pins ledgers"],
    )
    for name, c in cursors.items():
        label = f"{name} (system)" if c.get("system") else name
        row = [
            label,
            *([c.get("pipeline")] if pipelines else []),
            c.get("markDeletePosition"),
            c.get("backlog"),
            human.size(c.get("backlogSize")),
            _ids(c.get("pinsLedgers") or []),
        ]
        table.add_row(*(human.cell(v) for v in row))
    return table


def _last_check(last: Mapping[str, Any]) -> str:
    trimmed = last.get("trimmed") or []
    text = f"last retention check {human.when(last.get('checkedAtMs'))}: " + (
        f"trimmed ledgers {_ids(trimmed)} ({human.size(last.get('trimmedBytes'))})" if trimmed else "trimmed nothing"
    )
    for cursor, move in (last.get("ttl") or {}).items():
        text += f"; TTL moved {cursor} from {move.get('from')} to {move.get('to')}"
    for cursor, move in (last.get("evicted") or {}).items():
        text += f"; backlog quota moved {cursor} from {move.get('from')} to {move.get('to')}"
    errors = last.get("errors") or {}
    text += "; errors: " + "; ".join(f"{k}: {v}" for k, v in errors.items()) if errors else "; no errors"
    return text


def _bookie_gc(gc: Mapping[str, Any]) -> list[Any]:
    if "error" in gc and "ledgers" not in gc:
        return [f"bookie GC: unknown ({gc['error']})"]
    waiting = gc.get("topicBytesAwaitingGc") or 0
    head = (
        f"bookie GC: {human.size(waiting)} of this topic await GC"
        if waiting
        else "bookie GC: nothing of this topic awaits GC"
    )
    if gc.get("unreachableBookies"):
        head += f"; unreachable bookies: {', '.join(gc['unreachableBookies'])}"
    out: list[Any] = [head]
    ledgers = gc.get("ledgers") or []
    if ledgers:
        table = human.new_table("ledgers on the bookies", ["ledger", "state", "on disk", "summary"])
        for row in ledgers:
            table.add_row(
                *(
                    human.cell(v)
                    for v in (
                        row.get("ledgerId"),
                        str(row.get("state", "")).replace("_", " "),
                        human.size(row.get("bytesOnDisk")),
                        row.get("summary"),
                    )
                )
            )
        out.append(table)
    bookies = gc.get("bookies") or {}
    if bookies:
        table = human.new_table(
            "bookies", ["bookie", "reachable", "read-only", "entry logs", "awaiting GC", "last GC run", "error"]
        )
        for bookie, info in sorted(bookies.items()):
            table.add_row(
                *(
                    human.cell(v)
                    for v in (
                        bookie,
                        info.get("reachable"),
                        info.get("readOnly"),
                        info.get("entryLogs"),
                        human.size(info.get("bytesAwaitingGc")),
                        human.ago(info.get("lastGcRunMs")),
                        info.get("error"),
                    )
                )
            )
        out.append(table)
    return out


def _tiered(ex: Mapping[str, Any]) -> list[Any]:
    """Where each ledger lives (bookies, tier, both) and why, once the topic has offloaded anything."""
    rows = [(row.get("ledgerId"), row.get("tieredStorage") or {}) for row in ex.get("ledgers") or []]
    off = ex.get("offload") or {}
    if all(t.get("state") in (None, "NONE") for _, t in rows) and off.get("status") in (None, "NOT_RUN"):
        return []
    head = (
        f"offload: {str(off.get('status', '')).replace('_', ' ').lower()}"
        + (f" ({off['lastError']})" if off.get("lastError") else "")
        + f"; {human.size(ex.get('offloadedSize'))} offloaded"
    )
    table = human.new_table("tiered storage", ["ledger", "lives on", "offload state", "bookie copy"])
    for ledger_id, t in rows:
        table.add_row(*(human.cell(v) for v in (ledger_id, t.get("location"), t.get("state"), t.get("bookieCopy"))))
    return [head, table]


def lines(ex: Mapping[str, Any]) -> list[Any]:
    """What explain-storage prints: sentences (str) and rich tables, in order."""
    pol = ex.get("policies") or {}
    ledgers = ex.get("ledgers") or []
    deletable = ex.get("deletableNow") or []
    out: list[Any] = [
        f"{ex.get('topic')}: {human.size(ex.get('totalSize'))} in {len(ledgers)} "
        f"ledger{'s' if len(ledgers) != 1 else ''}; deletable now: "
        + (f"ledgers {_ids(deletable)} ({human.size(ex.get('deletableBytes'))})" if deletable else "nothing"),
        f"retention: {retention_text(pol.get('retention'))}{_source(pol, 'retention')}",
        f"message TTL: {human.duration(pol.get('messageTTLInSeconds')) if pol.get('messageTTLInSeconds') else 'off'}"
        f"{_source(pol, 'message_ttl_s')}",
        f"backlog quotas: {_quotas(pol.get('backlogQuotaMap') or {})}",
    ]
    if ex.get("slowestCursor"):
        out.append(f"slowest subscription: {ex['slowestCursor']}")
    compaction = _compaction(ex.get("compaction"))
    if compaction:
        out.append(f"compaction: {compaction}")
    out.append(_ledger_rows(ex))
    if ex.get("cursors"):
        out.append(_cursor_rows(ex))
    last = ex.get("lastRetentionCheck")
    if last:
        out.append(_last_check(last))
    out.extend(_tiered(ex))
    if ex.get("bookieGc") is not None:
        out.extend(_bookie_gc(ex["bookieGc"]))
    return out


def print_explain(ex: Mapping[str, Any]) -> None:
    """Print `lines` on the human console, a blank line around each table."""
    items: list[Any] = []
    for item in lines(ex):
        if not isinstance(item, str):
            if items and items[-1] != "":
                items.append("")
            items.extend([item, ""])
        else:
            items.append(item)
    human.emit(*items)
