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

from ._options import SinkOptions, SourceOptions
from ._rows import SCHEMA_DDL
from ._sink import MagnetarStreamWriter, enable_deduplication
from ._source import MagnetarBatchReader, MagnetarStreamReader

__all__ = ["MagnetarDataSource", "register"]

log = logging.getLogger("sinks.spark")


class MagnetarDataSource(DataSource):
    """PySpark data source for Magnetar topics (short name ``magnetar``).

    * ``spark.readStream.format("magnetar")``: `MagnetarStreamReader` (options: service.url,
      admin.url, topic | topics | topicsPattern, startingOffsets, startingTime, failOnDataLoss,
      maxEntriesPerTrigger, maxBytesPerTrigger, subscriptionName, readMode, metadata.url, ...).
    * ``spark.read.format("magnetar")``: `MagnetarBatchReader` (startingOffsets, endingOffsets).
    * ``df.writeStream.format("magnetar")``: `MagnetarStreamWriter` (service.url, topic, admin.url).

    Option errors raise ValueError naming the option, when the reader or writer is created.
    """

    @classmethod
    def name(cls) -> str:
        return "magnetar"

    def schema(self) -> str:
        return SCHEMA_DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return MagnetarStreamReader(SourceOptions.parse(self.options))

    def reader(self, schema: Any) -> DataSourceReader:
        return MagnetarBatchReader(SourceOptions.parse(self.options, batch=True))

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        opts = SinkOptions.parse(self.options)
        if "value" not in [f.name for f in schema.fields]:
            raise ValueError("the magnetar sink needs a 'value' column (binary or string)")
        if opts.enable_deduplication:
            if opts.admin_url:
                if enable_deduplication(opts.admin_url, opts.topic):
                    log.info("deduplication enabled on the namespace of %s", opts.topic)
            else:
                log.warning("no admin.url: make sure deduplication is enabled on %s's namespace, "
                            "or writes are at-least-once", opts.topic)
        return MagnetarStreamWriter(opts)


def register(spark: Any) -> None:
    """Register `MagnetarDataSource` on ``spark`` (a SparkSession) as format ``magnetar``."""
    spark.dataSource.register(MagnetarDataSource)
