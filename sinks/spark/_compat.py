"""What differs between the PySpark releases the data source runs on (4.0 onwards).

PySpark 4.0 introduced the Python data source API that `MagnetarDataSource` implements. PySpark 4.2
added admission control and AvailableNow for Python streaming readers
(``pyspark.sql.streaming.datasource``): ``latestOffset(start, limit)``, ``getDefaultReadLimit`` and
``SupportsTriggerAvailableNow``. Before it (4.0, 4.1) Spark calls ``latestOffset()`` with no
argument, so a reader learns neither the batch's start nor a limit, and Spark runs
``Trigger.AvailableNow`` itself by fixing the end offset it got from the first ``latestOffset()``.

This module gives the reader one set of names on every release: the PySpark classes where they
exist, stand-ins with the same fields otherwise (which Spark never sees: only a reader that
takes ``start`` and ``limit`` receives them), and `ADMISSION_CONTROL`, which the source and the
option checks consult.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ADMISSION_CONTROL",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxBytes",
    "ReadMaxRows",
    "SupportsTriggerAvailableNow",
    "old_pyspark_reason",
]

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
    """True when Spark passes ``start`` and a read limit to ``latestOffset`` (PySpark 4.2 onwards)."""
except ImportError:  # PySpark 4.0 and 4.1
    ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """Stand-in for PySpark 4.2's ReadLimit (never passed by an older Spark)."""

    @dataclass(frozen=True)
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """Stand-in: no limit."""

    @dataclass(frozen=True)
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        """Stand-in: at most ``max_rows`` rows (entries) per batch."""

        max_rows: int

    @dataclass(frozen=True)
    class ReadMaxBytes(ReadLimit):  # type: ignore[no-redef]
        """Stand-in: at most ``max_bytes`` bytes per batch."""

        max_bytes: int

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in mixin: older Spark runs AvailableNow without the reader's help."""

        def prepareForTriggerAvailableNow(self) -> None:
            """Never called by PySpark 4.0 or 4.1."""


def old_pyspark_reason() -> str:
    """Why an option needs PySpark 4.2 (for error messages), naming the PySpark in use."""
    try:
        from pyspark import __version__ as version
    except ImportError:  # pragma: no cover - the data source cannot load without PySpark
        version = "unknown"
    return (
        f"this is PySpark {version}: before 4.2 Spark tells a Python streaming source neither where a "
        "micro-batch starts nor its read limit"
    )
