"""`MagnetarDataSource`, the ``magnetar`` format, and `register`."""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
)

from ._decode import ValueSchema
from ._options import SinkOptions, SourceOptions
from ._rows import SCHEMA_DDL
from ._sink import MagnetarStreamWriter, enable_deduplication
from ._source import MagnetarBatchReader, MagnetarStreamReader, resolve_value_schema

__all__ = ["MagnetarDataSource", "register"]

log = logging.getLogger("sinks.spark")


class MagnetarDataSource(DataSource):
    """PySpark data source for Magnetar topics (short name ``magnetar``).

    * ``spark.readStream.format("magnetar")``: `MagnetarStreamReader` (options: service.url,
      admin.url, topic | topics | topicsPattern, startingOffsets, startingTime, failOnDataLoss,
      maxEntriesPerTrigger, maxBytesPerTrigger, subscriptionName, readMode, metadata.url,
      managedLedgerPassword (readMode=bookies: the brokers' ledger password), ...).
    * ``spark.read.format("magnetar")``: `MagnetarBatchReader` (startingOffsets, endingOffsets).
    * ``df.writeStream.format("magnetar")``: `MagnetarStreamWriter` (service.url, topic, admin.url).

    A topic with a JSON or Avro schema is read as its record's fields (plus the ``__`` columns)
    instead of ``value``; ``decodeSchema=false`` keeps the raw ``value``.

    Option errors raise ValueError naming the option, when the reader or writer is created.
    """

    @classmethod
    def name(cls) -> str:
        return "magnetar"

    def schema(self) -> str:
        # decoded columns when the topic has a JSON or Avro schema (see `_decode`)
        value_schema = resolve_value_schema(SourceOptions.parse(self.options))
        return value_schema.ddl() if value_schema is not None else SCHEMA_DDL

    def _value_schema(self, schema: Any, opts: SourceOptions) -> ValueSchema | None:
        # Spark may build the reader on another instance than schema(): resolve again, unless the
        # query's schema is the raw one (a user-given schema with a value column)
        if schema is not None and "value" in [f.name for f in getattr(schema, "fields", [])]:
            return None
        return resolve_value_schema(opts)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        opts = SourceOptions.parse(self.options)
        return MagnetarStreamReader(opts, self._value_schema(schema, opts))

    def reader(self, schema: Any) -> DataSourceReader:
        opts = SourceOptions.parse(self.options, batch=True)
        return MagnetarBatchReader(opts, self._value_schema(schema, opts))

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        opts = SinkOptions.parse(self.options)
        if "value" not in [f.name for f in schema.fields]:
            raise ValueError("the magnetar sink needs a 'value' column (binary or string)")
        if opts.enable_deduplication:
            if opts.admin_url:
                if enable_deduplication(opts.admin_url, opts.topic, opts.security):
                    log.info("deduplication enabled on the namespace of %s", opts.topic)
            else:
                log.warning("no admin.url: make sure deduplication is enabled on %s's namespace, "
                            "or writes are at-least-once", opts.topic)
        return MagnetarStreamWriter(opts)


def register(spark: Any) -> None:
    """Register `MagnetarDataSource` on ``spark`` (a SparkSession) as format ``magnetar``."""
    spark.dataSource.register(MagnetarDataSource)
