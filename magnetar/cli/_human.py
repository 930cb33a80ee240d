"""Output people read: times, durations and sizes in units, values as words, tables that fit the
terminal (the ``--json`` output keeps the raw numbers and Pulsar's field names).

`text` writes one value of the admin API's JSON for a person, choosing the unit from the field's
name (``...Size`` and ``bytes...`` are bytes, ``...Seconds`` a duration, ``...Timestamp`` and
``...AtMs`` a time since the epoch, ``msgThroughput...`` bytes per second); `show` prints a
JSON value as a table; `console` is where every human line goes, at most `WIDTH` columns wide
unless the terminal says otherwise.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

__all__ = ["WIDTH", "ago", "cell", "console", "duration", "emit", "new_table", "show", "size", "text", "when"]

WIDTH = 100
"""Columns of human output when it does not go to a terminal (a file, a pipe, a test)."""


def duration(seconds: float | int | None) -> str:
    """``3d 4h``, ``2h 5m``, ``4m 10s``, ``12s``, ``0.4s``: the two largest units; '' for None."""
    if seconds is None:
        return ""
    s = float(seconds)
    if s < 0:
        return "-" + duration(-s)
    if s < 10:
        return f"{s:.1f}s".replace(".0s", "s")
    whole = int(s)
    parts: list[str] = []
    for unit, size_ in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if whole >= size_ or (parts and len(parts) < 2):
            parts.append(f"{whole // size_}{unit}")
            whole %= size_
        if len(parts) == 2:
            break
    return " ".join(p for p in parts if not p.startswith("0") or p == parts[0])


def when(epoch_ms: float | int | None, now_s: float | None = None) -> str:
    """``2026-11-24 10:31:22 UTC (5m 3s ago)`` for a time in ms since the epoch; ``never`` for
    None or 0 (what the servers report for "not yet")."""
    if not epoch_ms:
        return "never"
    now = time.time() if now_s is None else now_s
    at = float(epoch_ms) / 1000
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
    gone = now - at
    return f"{stamp} ({duration(gone)} ago)" if gone >= 0 else f"{stamp} (in {duration(-gone)})"


def ago(epoch_ms: float | int | None, now_s: float | None = None) -> str:
    """``5m 3s ago`` (or ``in 2m``) for a time in ms since the epoch; ``never`` for None or 0."""
    if not epoch_ms:
        return "never"
    gone = (time.time() if now_s is None else now_s) - float(epoch_ms) / 1000
    return f"{duration(gone)} ago" if gone >= 0 else f"in {duration(-gone)}"


def size(n: float | int | None) -> str:
    """``512 B``, ``1.5 KiB``, ``20 MiB``, ``3.2 GiB`` (powers of 1024); '' for None."""
    if n is None:
        return ""
    value = float(n)
    if abs(value) < 1024:
        return f"{value:.0f} B" if value == int(value) else f"{value:.1f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if abs(value) < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}".replace(".0 ", " ")


_TIME_SUFFIXES = ("Timestamp", "TimeStamp", "AtMs", "RunMs", "TimeMs")
_TIME_KEYS = frozenset({"earliestMsgPublishTimeInBacklogs", "connectedSince", "lastAckedTime", "lastConsumedTime"})


def _number(value: int | float, key: str) -> str:
    low = key.lower()
    if key.endswith(_TIME_SUFFIXES) or key in _TIME_KEYS:
        return when(value)
    if value < 0:
        return str(value)  # Pulsar's "not set" / "no limit" (-1) stays as it is
    if key.endswith("Seconds"):
        return duration(value)
    if key.endswith("InMinutes"):
        return duration(value * 60) if value else "0"
    if key.endswith("InMB"):
        return size(value * 1024 * 1024)
    if "throughput" in low:
        return f"{size(value)}/s"
    if (
        key.endswith(("Size", "Bytes", "SizeInBytes"))
        or low.startswith("bytes")
        or key == "size"
        or "bytesawaiting" in low
        or low.endswith("bytesondisk")
    ):
        return size(value)
    if isinstance(value, float):
        return f"{value:,.1f}" if "rate" in low else f"{value:g}"
    return str(value)


def text(value: Any, key: str = "") -> str:
    """One JSON value as a person reads it: ``yes``/``no``, lists joined with commas, objects as
    ``key: value`` pairs, numbers in the unit ``key`` implies; '' for None and empty lists."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return _number(value, key)
    if isinstance(value, list):
        return ", ".join(text(v, key) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {text(v, str(k)) or '-'}" for k, v in value.items())
    return str(value)


def cell(value: Any, key: str = "") -> Any:
    """`text` as a table cell (printed as it is: brackets in it are not markup)."""
    from rich.text import Text

    return Text(text(value, key))


def console() -> Any:
    """The rich console of human output: the terminal's width, else ``COLUMNS``, else `WIDTH`."""
    from rich.console import Console

    if sys.stdout.isatty():
        return Console()
    columns = os.environ.get("COLUMNS", "")
    return Console(width=int(columns) if columns.isdigit() else WIDTH)


def new_table(title: str | None, columns: list[str]) -> Any:
    """An empty table in the house style: a header rule, no vertical lines (so more columns
    fit), long cells wrapped at word boundaries."""
    from rich import box
    from rich.table import Table

    table = Table(
        title=title,
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
        title_justify="left",
        title_style="bold",
    )
    for col in columns:
        table.add_column(col, overflow="fold")
    return table


def show(value: Any, *, title: str | None = None, columns: list[str] | None = None) -> None:
    """Print a JSON value for a person: a list as a one-column table, a list of objects as a table
    of ``columns`` (all their keys if not given), an object as a key / value table, anything else
    as `text`; ``(not set)`` for None."""
    if value is None:
        console().print("(not set)")
        return
    if isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
        table = new_table(title, [columns[0] if columns else "name"])
        for v in value:
            table.add_row(cell(v))
    elif isinstance(value, list):
        cols = columns or sorted({k for row in value for k in row})
        cells = [[text(row.get(c), c) for c in cols] for row in value]
        if _too_wide(cols, cells, console().width):
            _show_records(title, cols, cells)
            return
        table = new_table(title, cols)
        for row_cells in cells:
            table.add_row(*(cell(c) for c in row_cells))
    elif isinstance(value, dict):
        table = new_table(title, ["key", "value"])
        for k, v in value.items():
            table.add_row(cell(str(k)), cell(v, str(k)))
    else:
        console().print(text(value), soft_wrap=True, markup=False, highlight=False)
        return
    emit(table, "")


def _too_wide(cols: list[str], cells: list[list[str]], width: int) -> bool:
    """Whether a table would have to cut words (a column narrower than its header or than the
    longest word of its cells, two columns of spacing each)."""
    need = 0
    for i, col in enumerate(cols):
        words = [w for row in cells for w in row[i].split()] or [""]
        need += max(len(col), max(len(w) for w in words)) + 2
    return need > width


def _show_records(title: str | None, cols: list[str], cells: list[list[str]]) -> None:
    """Rows too wide for a table, one key / value block each."""
    from rich.text import Text

    items: list[Any] = []
    for n, row_cells in enumerate(cells, 1):
        block = new_table(f"{title} {n}" if title else f"{n}", ["key", "value"])
        for col, value in zip(cols, row_cells, strict=True):
            block.add_row(Text(col), Text(value))
        items.extend([block, ""])
    emit(*items)


def emit(*items: Any) -> None:
    """Print sentences (str, wrapped at the console's width) and tables on the human console,
    without the spaces rich pads the last column of each line with."""
    out = console()
    with out.capture() as captured:
        for item in items:
            if isinstance(item, str):
                out.print(item, markup=False, highlight=False)
            else:
                out.print(item)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
