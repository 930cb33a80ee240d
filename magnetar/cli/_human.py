"""Times as people read them in CLI tables (the ``--json`` output keeps the raw numbers)."""

from __future__ import annotations

import time

__all__ = ["duration", "when"]


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
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if whole >= size or (parts and len(parts) < 2):
            parts.append(f"{whole // size}{unit}")
            whole %= size
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
    ago = now - at
    return f"{stamp} ({duration(ago)} ago)" if ago >= 0 else f"{stamp} (in {duration(-ago)})"
