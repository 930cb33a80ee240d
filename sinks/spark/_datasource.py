"""`MagnetarDataSource`, the ``magnetar`` format, and `register`."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
import sys
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

from ._decode import ValueSchema
from ._options import SinkOptions, SourceOptions
from ._rows import SCHEMA_DDL
from ._sink import MagnetarBatchWriter, MagnetarStreamWriter, plan_sink, prepare_topic
from ._source import MagnetarBatchReader, MagnetarStreamReader, resolve_value_schema

__all__ = ["MagnetarDataSource", "register", "WORKER_MODULES"]

log = logging.getLogger("sinks.spark")

WORKER_MODULES = ("sinks.spark", "pulsar", "pyarrow", "fastavro", "cramjam")
"""What a Spark Python worker imports to run this data source (the ``spark`` extra)."""


class MagnetarDataSource(DataSource):
    """PySpark data source for Magnetar topics (short name ``magnetar``).

    * ``spark.readStream.format("magnetar")``: `MagnetarStreamReader`.
    * ``spark.read.format("magnetar")``: `MagnetarBatchReader`.
    * ``df.writeStream.format("magnetar")`` / ``df.write.format("magnetar")``: `MagnetarStreamWriter`
      / `MagnetarBatchWriter`.

    A topic with a schema is read as typed columns (see `_decode`); ``decodeSchema=false`` keeps the
    raw ``value``. Option errors (unknown or misspelt names, bad values, a topic that does not
    exist, topics with different schemas) raise ValueError naming the option, when the query is
    defined. See sinks/spark/README.md for every option.
    """

    @classmethod
    def name(cls) -> str:
        return "magnetar"

    def schema(self) -> str:
        value_schema = resolve_value_schema(SourceOptions.parse(self.options, batch=True))
        return value_schema.ddl() if value_schema is not None else SCHEMA_DDL

    def _value_schema(self, schema: Any, opts: SourceOptions) -> ValueSchema | None:
        # Spark may build the reader on another instance than schema(): resolve again, unless the
        # query's schema is the raw one (a user-given schema with a binary value column)
        fields = {f.name: f for f in getattr(schema, "fields", [])}
        if "value" in fields and type(fields["value"].dataType).__name__ == "BinaryType" and "key" not in fields:
            return None
        return resolve_value_schema(opts)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        opts = SourceOptions.parse(self.options)
        return MagnetarStreamReader(opts, self._value_schema(schema, opts))

    def reader(self, schema: Any) -> DataSourceReader:
        opts = SourceOptions.parse(self.options, batch=True)
        return MagnetarBatchReader(opts, self._value_schema(schema, opts))

    def _sink(self, schema: Any, batch: bool) -> tuple[SinkOptions, Any]:
        opts = SinkOptions.parse(self.options)
        plan = plan_sink(schema, opts, batch=batch)
        if opts.topic:
            prepare_topic(opts, plan, opts.topic)
        return opts, plan

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return MagnetarStreamWriter(*self._sink(schema, batch=False))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ValueError("a topic cannot be overwritten: use mode('append')")
        return MagnetarBatchWriter(*self._sink(schema, batch=True))


def _missing_modules(python: str) -> list[str] | None:
    """The `WORKER_MODULES` that ``python`` cannot import (None when it cannot run at all)."""
    code = (
        "import importlib.util, sys\n"
        "def ok(m):\n"
        "    try:\n        return importlib.util.find_spec(m) is not None\n"
        "    except ModuleNotFoundError:\n        return False\n"
        "print(' '.join(m for m in sys.argv[1:] if not ok(m)))"
    )
    try:
        out = subprocess.run([python, "-c", code, *WORKER_MODULES], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.split()


def register(spark: Any) -> None:
    """Register `MagnetarDataSource` on ``spark`` (a SparkSession) as format ``magnetar``.

    Spark runs the data source in Python workers started with ``PYSPARK_PYTHON`` (default
    ``python3``), which must import this package and the ``spark`` extra. When neither
    ``PYSPARK_PYTHON`` nor ``spark.pyspark.python`` is set and Spark runs locally, the workers
    are pointed at this interpreter (``sys.executable``). When the workers' Python is set but
    cannot import what the source needs, a RuntimeError says what to set (checked for local
    masters, where the workers' Python is this machine's)."""
    sc = spark.sparkContext
    conf_python = sc.getConf().get("spark.pyspark.python", None)
    local = str(sc.master).startswith("local")
    if not os.environ.get("PYSPARK_PYTHON") and not conf_python:
        if local:
            if sc.pythonExec != sys.executable:
                log.info("PYSPARK_PYTHON is not set: Spark's Python workers run %s", sys.executable)
            sc.pythonExec = sys.executable
        else:
            log.warning(
                "PYSPARK_PYTHON is not set: Spark's Python workers run %r, which must import %s "
                "(pip install 'magnetar[spark]' there, or set PYSPARK_PYTHON / spark.pyspark.python)",
                sc.pythonExec,
                ", ".join(WORKER_MODULES),
            )
    elif local:
        python = shutil.which(sc.pythonExec) or sc.pythonExec
        missing = _missing_modules(python)
        if missing is None or missing:
            what = "cannot run" if missing is None else f"cannot import {', '.join(missing)}"
            raise RuntimeError(
                f"Spark's Python workers run {sc.pythonExec!r} (PYSPARK_PYTHON or "
                f"spark.pyspark.python), which {what}: set PYSPARK_PYTHON to a Python with "
                f"magnetar[spark] installed, e.g. PYSPARK_PYTHON={sys.executable}"
            )
    if importlib.util.find_spec("pulsar") is None:
        raise RuntimeError("the official Pulsar client is missing: pip install 'magnetar[spark]'")
    spark.dataSource.register(MagnetarDataSource)
