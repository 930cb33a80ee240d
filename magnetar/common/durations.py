"""Relative durations as Pulsar users write them (``30s``, ``10m``, ``2h``, ``1d``, ``1w``, ``1y``):
one grammar for every Magnetar command that takes one (token expiry, retention time, inactive-topic
duration, perf run length).

Grammar: an optional sign, a number (``30``, ``1.5``, ``.5``), optional spaces, and an optional
unit, in any case: ``ms``, ``s``, ``m`` (minutes), ``h``, ``d``, ``w`` (7 days), ``y`` (365 days).
A bare number is in ``bare_unit`` (seconds unless the caller says otherwise, as pulsar-admin 4.0
reads every duration, retention times included). Pulsar's own parser (``RelativeTimeUtil``)
takes whole numbers with one of ``s m h d w y``; everything it accepts is accepted here with the
same meaning, plus fractions and ``ms``, which Magnetar's perf tool has always taken.

What a caller does with a negative or fractional value (``-1`` for "infinite", rounding to whole
minutes) is the caller's rule, not the grammar's.
"""

from __future__ import annotations

import re

__all__ = ["UNITS", "parse_duration"]

UNITS: dict[str, float] = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
    "y": 365 * 86400.0,
}
"""Seconds per unit."""

_DURATION = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(ms|[smhdwy])?")


def parse_duration(text: str, *, bare_unit: str = "s") -> float:
    """Seconds of ``text`` (module grammar); a number without a unit is in ``bare_unit``.

    Raises `ValueError` naming the text for anything else (an unknown unit, no number, trailing
    text)."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(f"not a duration: {text!r} (use a number with ms, s, m, h, d, w or y: 30s, 10m, 2h, 1d)")
    number, unit = match.groups()
    return float(number) * UNITS[unit or bare_unit]
