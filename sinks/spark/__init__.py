"""Magnetar topics as a PySpark data source (format ``magnetar``): a streaming source with exact,
replayable micro-batches, a batch source, and an exactly-once streaming sink.

    from sinks.spark import register
    register(spark)
    df = (spark.readStream.format("magnetar")
          .option("service.url", "pulsar://127.0.0.1:6650").option("admin.url", "http://127.0.0.1:8080")
          .option("topic", "events").load())

See ``sinks/spark/README.md`` for options, offsets, read modes, the query's durable subscription
(``python -m sinks.spark pipelines`` lists and removes those of retired queries) and the examples.
"""

from ._admin import AdminClient as AdminClient
from ._admin import AdminError as AdminError
from ._datasource import MagnetarDataSource as MagnetarDataSource
from ._datasource import register as register
from ._offsets import Position as Position
from ._options import SinkOptions as SinkOptions
from ._options import SourceOptions as SourceOptions
from ._pipelines import PipelineSubscription as PipelineSubscription
from ._pipelines import checkpoint_subscription as checkpoint_subscription
from ._pipelines import find_pipelines as find_pipelines
from ._pipelines import remove_pipeline as remove_pipeline
from ._read import DataLossError as DataLossError
from ._rows import SCHEMA_DDL as SCHEMA_DDL
from ._sink import MagnetarBatchWriter as MagnetarBatchWriter
from ._sink import MagnetarStreamWriter as MagnetarStreamWriter
from ._sink import sequence_id as sequence_id
from ._source import MagnetarBatchReader as MagnetarBatchReader
from ._source import MagnetarStreamReader as MagnetarStreamReader

__all__ = [
    "SCHEMA_DDL",
    "AdminClient",
    "AdminError",
    "DataLossError",
    "MagnetarBatchReader",
    "MagnetarDataSource",
    "MagnetarBatchWriter",
    "MagnetarStreamReader",
    "MagnetarStreamWriter",
    "PipelineSubscription",
    "Position",
    "SinkOptions",
    "SourceOptions",
    "checkpoint_subscription",
    "find_pipelines",
    "register",
    "remove_pipeline",
    "sequence_id",
]
