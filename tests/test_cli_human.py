"""Human CLI output: values in units and words, explain-storage as sentences and tables that fit
100 columns (`magnetar.cli._human`, `magnetar.cli._explain_view`)."""

from __future__ import annotations

import io
import re

from rich.console import Console

from magnetar.cli import _human as human
from magnetar.cli._explain_view import lines, retention_text

NOW_MS = 1_700_000_000_000

EXPLAIN = {
    "topic": "persistent://public/default/my-topic",
    "nowMs": NOW_MS,
    "totalSize": 5_000_000,
    "slowestCursor": "my-sub",
    "deletableNow": [3],
    "deletableBytes": 1_048_576,
    "policies": {
        "retention": {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0},
        "messageTTLInSeconds": 0,
        "backlogQuotaMap": {},
        "sources": {"retention": "broker", "message_ttl_s": "broker"},
    },
    "ledgers": [
        {
            "ledgerId": 3,
            "entries": 10,
            "size": 1_048_576,
            "ageSeconds": 3725.0,
            "closedAtMs": NOW_MS - 3_725_000,
            "decision": "delete",
            "reason": "consumed_and_outside_retention",
            "pinnedBy": [],
            "explanation": "consumed by every cursor; deleting it leaves 3.8 MiB, at least the retention size of 0 B",
        },
        {
            "ledgerId": 7,
            "entries": 3,
            "size": 3_951_424,
            "ageSeconds": 42.0,
            "closedAtMs": None,
            "createdAtMs": NOW_MS - 42_000,
            "decision": "keep",
            "reason": "open_ledger",
            "pinnedBy": ["my-sub"],
            "explanation": "the current ledger (last of the list) is never trimmed",
        },
    ],
    "cursors": {
        "my-sub": {"markDeletePosition": "7:0", "backlog": 2, "backlogSize": 2048, "pinsLedgers": [7], "system": False}
    },
    "lastRetentionCheck": {
        "checkedAtMs": NOW_MS - 5000,
        "trimmed": [],
        "trimmedBytes": 0,
        "errors": {},
        "ttl": {},
        "evicted": {},
    },
    "compaction": {"status": "NOT_RUN", "horizon": None, "compactedLedger": None, "lastError": ""},
    "bookieGc": {
        "topicBytesAwaitingGc": 0,
        "unreachableBookies": [],
        "ledgers": [
            {
                "ledgerId": 7,
                "state": "live",
                "bytesOnDisk": 0,
                "summary": "live (OPEN); 127.0.0.1:3181: no entry log holds it yet (entries, if any, "
                "are in the journal and write cache until the next checkpoint)",
            }
        ],
        "bookies": {
            "127.0.0.1:3181": {
                "reachable": True,
                "readOnly": False,
                "entryLogs": 0,
                "bytesAwaitingGc": 0,
                "lastGcRunMs": None,
            }
        },
    },
}


def _render(items: list[object]) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=human.WIDTH, color_system=None)
    for item in items:
        console.print(item, markup=False, highlight=False) if isinstance(item, str) else console.print(item)
    return buf.getvalue()


def test_values_in_units_and_words() -> None:
    assert [human.size(n) for n in (0, 39, 1536, 20 * 2**20, 3.25 * 2**30)] == [
        "0 B",
        "39 B",
        "1.5 KiB",
        "20 MiB",
        "3.2 GiB",
    ]
    assert human.ago(NOW_MS - 303_000, now_s=NOW_MS / 1000) == "5m 3s ago" and human.ago(0) == "never"
    assert human.text(True) == "yes" and human.text(False) == "no" and human.text(None) == ""
    assert human.text([]) == "" and human.text(["a", "b"]) == "a, b"
    assert (
        human.text({"retentionTimeInMinutes": 90, "retentionSizeInMB": -1})
        == "retentionTimeInMinutes: 1h 30m; retentionSizeInMB: -1"
    )
    assert human.text(39, "storageSize") == "39 B" and human.text(2048, "bytesOutCounter") == "2 KiB"
    assert human.text(1024.0, "msgThroughputIn") == "1 KiB/s" and human.text(12.34, "msgRateIn") == "12.3"
    assert human.text(75, "oldestBacklogMessageAgeSeconds") == "1m 15s"
    assert human.text(-1, "backlogQuotaLimitSize") == "-1" and human.text(7, "ledgerId") == "7"
    assert human.text(0, "lastOffloadSuccessTimeStamp") == "never"
    assert human.text(NOW_MS, "lastLedgerCreatedTimestamp").startswith("2023-11-14 22:13:20 UTC")


def test_retention_in_words() -> None:
    assert retention_text({"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}).startswith("none")
    assert retention_text({"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}).startswith("unlimited")
    assert (
        retention_text({"retentionTimeInMinutes": 120, "retentionSizeInMB": 10})
        == "acknowledged messages kept up to 2h and 10 MiB"
    )
    assert (
        retention_text({"retentionTimeInMinutes": -1, "retentionSizeInMB": 1024})
        == "acknowledged messages kept up to no time limit and 1 GiB"
    )


def test_explain_storage_reads_as_text_in_100_columns() -> None:
    out = _render(lines(EXPLAIN))
    assert max(len(line) for line in out.splitlines()) <= human.WIDTH, out
    assert not re.search(r"\{'|\[\]|\bNone\b|\bTrue\b|\bFalse\b|\b1[5-9]\d{11}\b", out), out
    assert "persistent://public/default/my-topic: 4.8 MiB in 2 ledgers; deletable now: ledgers 3 (1 MiB)" in out
    assert "retention: none: acknowledged messages are deleted (broker default)" in out
    assert "message TTL: off (broker default)" in out
    assert re.search(r"^7 +3 +3\.8 MiB +42s \(open\) +keep +the current ledger", out, re.M), out
    assert re.search(r"^3 +10 +1 MiB +1h 2m +delete +consumed by every cursor", out, re.M), out
    assert "pinned by my-sub" in out
    assert re.search(r"^my-sub +7:0 +2 +2 KiB +7", out, re.M), out
    assert "trimmed nothing; no errors" in out and "bookie GC: nothing of this topic awaits GC" in out
    assert re.search(r"^127\.0\.0\.1:3181 +yes +no +0 +0 B +never", out, re.M), out


def test_generic_tables_fit_100_columns_and_keep_brackets() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=human.WIDTH, color_system=None)
    table = human.new_table("wide", [f"column{i}" for i in range(9)])
    table.add_row(*(human.cell(f"[value {i}] " * 3) for i in range(9)))
    console.print(table)
    out = buf.getvalue()
    assert max(len(line) for line in out.splitlines()) <= human.WIDTH
    assert "[value" in out  # cells are not read as rich markup


def test_rows_too_wide_for_a_table_print_as_blocks(capsys: object) -> None:
    rows = [{f"metric_number_{i}": i * 1000 for i in range(12)} | {"dimension": "cluster=standalone"}]
    human.show(rows, title="metrics")
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert max(len(line) for line in out.splitlines()) <= human.WIDTH
    assert re.search(r"^metric_number_11 +11000$", out, re.M), out  # whole names, one per line
    narrow = [{"name": "a", "value": 1}, {"name": "b", "value": 2}]
    human.show(narrow, title="t")
    assert re.search(r"^name +value$", capsys.readouterr().out, re.M)  # type: ignore[attr-defined]


def test_explain_storage_names_the_pipeline_of_a_cursor() -> None:
    ex = {
        **EXPLAIN,
        "cursors": {
            **EXPLAIN["cursors"],  # type: ignore[dict-item]
            "spark-sub": {
                "markDeletePosition": "3:9",
                "backlog": 0,
                "backlogSize": 0,
                "pinsLedgers": [],
                "system": False,
                "pipeline": "spark job A",
            },
        },
    }
    out = _render(lines(ex))
    assert re.search(r"^name +pipeline +mark-delete", out, re.M), out
    assert re.search(r"^spark-sub +spark job A +3:9 ", out, re.M), out
    assert "pipeline" not in _render(lines(EXPLAIN))  # no column when no cursor names one
