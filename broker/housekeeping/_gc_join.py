"""Join a topic's ledgers with what the bookies' GC explain says about them (pure, no I/O).

Inputs: the ledger metadata the broker read (`managed_ledger.LedgerPlacement`; ``ABSENT`` means
deleted from metadata), the ledgers retention trimmed (`TrimmedLedger`), each bookie's answer to
``GET /api/v1/bookie/gc/explain`` (`BookieAnswer`) and where earlier answers saw each ledger
(``seen``: ledger -> bookie -> entry log -> bytes).

A bookie's explain lists, per entry log, the ledgers its index still stores (pins, with their
metadata status). Once the bookie's ledger GC has deleted a ledger from its index, the ledger's
bytes stay in its entry logs as garbage until each log is deleted (no live ledger left) or
compacted; only an earlier sighting (``seen``) says which logs those were. Hence the per-bookie
status of a ledger, in this order:

* ``unreachable`` - the bookie did not answer (time-out, refused, bad reply).
* ``holds`` - the bookie's index still stores the ledger: its bytes are listed per entry log. For a
  deleted ledger this means the bookie's next ledger GC run will drop it.
* ``garbage`` - the index no longer stores it, but an entry log that held it still exists: the
  bytes are reclaimed when that log is compacted or deleted (the log's own reason says when).
* ``not_flushed`` - a live ledger of this bookie's ensemble with no entry log yet (empty, or its
  entries are in the journal and write cache until the next checkpoint).
* ``reclaimed`` - nothing of it is left on that bookie's entry logs.

A ledger's overall ``state``: ``live`` (metadata present) or, for deleted ones,
``awaiting_ledger_gc`` (some bookie holds it), ``awaiting_compaction`` (only garbage is left),
``unknown`` (a bookie that may hold it did not answer) or ``reclaimed``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from managed_ledger import LedgerPlacement

__all__ = ["BookieAnswer", "TrimmedLedger", "join_gc_explain", "awaiting_gc_bytes", "ledger_sightings"]


@dataclass(frozen=True)
class TrimmedLedger:
    """A ledger retention removed from a topic (metadata deleted at ``trimmed_at_ms``)."""

    ledger_id: int
    trimmed_at_ms: int
    size: int | None = None


@dataclass(frozen=True)
class BookieAnswer:
    """One bookie's reply to the GC explain (``doc``) or why there is none (``error``)."""

    bookie_id: str
    http_url: str | None
    doc: Mapping[str, Any] | None = None
    error: str | None = None
    read_only: bool = False


def ledger_sightings(doc: Mapping[str, Any]) -> dict[int, dict[int, int]]:
    """ledger -> entry log id -> bytes, from one bookie's explain document (pure)."""
    out: dict[int, dict[int, int]] = {}
    for row in doc.get("logs", ()):
        for pin in row.get("ledgers", ()):
            out.setdefault(int(pin["ledger_id"]), {})[int(row["log_id"])] = int(pin["bytes"])
    return out


def awaiting_gc_bytes(doc: Mapping[str, Any]) -> int:
    """Bytes of one bookie that belong to ledgers deleted from metadata (pure).

    Counts, per entry log, the bytes of ledgers its index no longer stores (``total_bytes -
    live_bytes``: only deleted ledgers leave the index) plus the pins whose metadata is
    ``absent`` (deleted from metadata, not yet by the bookie). Pins past the bookie's
    ``max_ledgers`` limit are not looked at.
    """
    total = 0
    for row in doc.get("logs", ()):
        total += max(0, int(row.get("total_bytes", 0)) - int(row.get("live_bytes", 0)))
        total += sum(int(p["bytes"]) for p in row.get("ledgers", ()) if p.get("metadata") == "absent")
    return total


def _fmt_ms(ms: int | None) -> str:
    if ms is None:
        return "an unknown time"
    import datetime

    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _log_row(log: Mapping[str, Any], nbytes: int) -> dict[str, Any]:
    return {
        "logId": log["log_id"],
        "logFile": log.get("log_file", f"{int(log['log_id']):x}.log"),
        "directory": log.get("directory"),
        "bytes": nbytes,
        "logReason": log.get("reason"),
        "logDetail": log.get("detail"),
        # why GC rolled this log before logSizeLimit (None: it filled up, or is current)
        "rolledForGc": log.get("rolled_for_gc"),
    }


def _on_bookie(
    lid: int, live: bool, in_ensemble: bool, answer: BookieAnswer, seen: Mapping[str, Mapping[int, int]]
) -> dict[str, Any] | None:
    """The status of ledger ``lid`` on one bookie, None when the bookie has nothing to do with it."""
    remembered = seen.get(answer.bookie_id, {})
    if answer.doc is None:
        if in_ensemble or remembered or not live:  # a deleted ledger's ensemble is unknown
            return {
                "status": "unreachable",
                "error": answer.error,
                "bytes": None,
                "entryLogs": [],
                "detail": answer.error or "bookie unreachable",
            }
        return None
    logs = {int(row["log_id"]): row for row in answer.doc.get("logs", ())}
    holding = []
    for row in logs.values():
        for pin in row.get("ledgers", ()):
            if int(pin["ledger_id"]) == lid:
                holding.append(_log_row(row, int(pin["bytes"])))
    if holding:
        n = sum(r["bytes"] for r in holding)
        if live:
            detail = f"{n} bytes in {len(holding)} entry log(s)"
        else:
            detail = (
                f"still holds {n} bytes in "
                + ", ".join(r["logFile"] for r in holding)
                + ": its index still stores the ledger; the bookie's next GC run deletes it "
                "(every gcWaitTime, or now with PUT /api/v1/bookie/gc)"
            )
        return {"status": "holds", "bytes": n, "entryLogs": holding, "detail": detail}
    garbage = [_log_row(logs[log_id], nbytes) for log_id, nbytes in sorted(remembered.items()) if log_id in logs]
    if garbage and not live:
        n = sum(r["bytes"] for r in garbage)
        why = "; ".join(f"{r['logFile']}: {r['logReason']} ({r['logDetail']})" for r in garbage)
        return {
            "status": "garbage",
            "bytes": n,
            "entryLogs": garbage,
            "detail": f"deleted from the bookie's index; {n} bytes stay on disk until the log is "
            f"compacted or deleted - {why}",
        }
    if live and in_ensemble:
        return {
            "status": "not_flushed",
            "bytes": 0,
            "entryLogs": [],
            "detail": "no entry log holds it yet (entries, if any, are in the journal and write "
            "cache until the next checkpoint)",
        }
    if remembered or (in_ensemble and not live):
        return {
            "status": "reclaimed",
            "bytes": 0,
            "entryLogs": [],
            "detail": "no entry log of this bookie holds it any more",
        }
    return None


def join_gc_explain(
    topic: str,
    ledger_ids: Sequence[int],
    placements: Mapping[int, LedgerPlacement],
    trimmed: Sequence[TrimmedLedger],
    answers: Mapping[str, BookieAnswer],
    seen: Mapping[int, Mapping[str, Mapping[int, int]]],
    now_ms: int,
) -> dict[str, Any]:
    """The ``bookieGc`` part of explain-storage for ``topic`` (shape in the README). Pure.

    Every id of ``ledger_ids`` and of ``trimmed`` gets one row, ordered by id. A ledger whose
    metadata is present is ``live``; one that is absent or was trimmed is deleted.
    """
    trims = {t.ledger_id: t for t in trimmed}
    ids = sorted(set(ledger_ids) | set(trims))
    unreachable = sorted(b for b, a in answers.items() if a.doc is None)
    rows = []
    topic_awaiting = 0
    for lid in ids:
        placement = placements.get(lid)
        state_md = placement.state if placement is not None else "ABSENT"
        live = state_md not in ("ABSENT",)
        ensemble = placement.bookies if placement is not None else ()
        per_bookie: dict[str, Any] = {}
        for bid in sorted(set(answers) | set(ensemble)):
            answer = answers.get(bid) or BookieAnswer(bid, None, error="bookie not registered")
            status = _on_bookie(lid, live, bid in ensemble, answer, seen.get(lid, {}))
            if status is not None:
                per_bookie[bid] = status
        statuses = {s["status"] for s in per_bookie.values()}
        on_disk = sum(s["bytes"] or 0 for s in per_bookie.values())
        trim = trims.get(lid)
        row: dict[str, Any] = {
            "ledgerId": lid,
            "metadata": "present" if live else "deleted",
            "metadataState": state_md,
            "ensemble": list(ensemble),
            "deletedAtMs": trim.trimmed_at_ms if trim is not None and not live else None,
            "size": trim.size if trim is not None else (placement.length if placement else None),
            "bytesOnDisk": on_disk,
            "bookies": per_bookie,
        }
        if live:
            row["state"] = "live"
            where = ", ".join(f"{b}: {s['detail']}" for b, s in per_bookie.items()) or "no bookie reports it"
            row["summary"] = f"live ({state_md}); {where}"
        else:
            topic_awaiting += on_disk
            if "holds" in statuses:
                row["state"] = "awaiting_ledger_gc"
            elif "garbage" in statuses:
                row["state"] = "awaiting_compaction"
            elif "unreachable" in statuses:
                row["state"] = "unknown"
            else:
                row["state"] = "reclaimed"
            when = _fmt_ms(row["deletedAtMs"]) if row["deletedAtMs"] is not None else "an earlier time"
            parts = []
            for b, s in per_bookie.items():
                if s["status"] == "unreachable":
                    parts.append(f"bookie {b} unreachable ({s['error']})")
                else:
                    parts.append(f"bookie {b} {'reclaimed it' if s['status'] == 'reclaimed' else s['detail']}")
            if not parts:
                parts.append(
                    "no bookie holds it" if not unreachable else f"bookies {', '.join(unreachable)} unreachable"
                )
            row["summary"] = f"deleted from metadata at {when}; " + "; ".join(parts)
        rows.append(row)
    bookies = {}
    for bid, a in sorted(answers.items()):
        info: dict[str, Any] = {"httpUrl": a.http_url, "reachable": a.doc is not None, "readOnly": a.read_only}
        if a.doc is None:
            info["error"] = a.error
        else:
            info["lastGcRunMs"] = a.doc.get("last_run_ms")
            info["lastGcResult"] = a.doc.get("last_result")
            info["entryLogs"] = len(a.doc.get("logs", ()))
            info["placement"] = a.doc.get("placement")  # "interleaved" or "per-ledger"
            info["bytesAwaitingGc"] = awaiting_gc_bytes(a.doc)
        bookies[bid] = info
    return {
        "topic": topic,
        "nowMs": now_ms,
        "bookies": bookies,
        "unreachableBookies": unreachable,
        "topicBytesAwaitingGc": topic_awaiting,
        "ledgers": rows,
    }
