"""The source's row schema and the two ways a row is made: from a stored entry (bookie reads) and
from a message of the official client (broker reads). Both give the same tuple for the same message.

Column names are the Pulsar Spark connector's: ``value``, ``__key``, ``__topic``, ``__messageId``,
``__publishTime``, ``__eventTime``, ``__messageProperties``. ``__messageId`` is Pulsar's
serialized ``MessageIdData`` (ledger, entry, partition, batch index), so it can be handed back to
any Pulsar client. Rows are emitted as Arrow record batches of bounded size.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

from google.protobuf.message import DecodeError

from protocols.pulsar import MessageIdData, MessageMetadata, invalid_utf8_field, split_batch

from ._decode import ValueSchema, arrow_type, decoder

__all__ = [
    "SCHEMA_DDL",
    "Row",
    "RowBatcher",
    "arrow_schema",
    "message_id_bytes",
    "rows_from_entry",
    "spark_schema",
]

SCHEMA_DDL = (
    "value BINARY, __key STRING, __topic STRING, __messageId BINARY, __publishTime TIMESTAMP, "
    "__eventTime TIMESTAMP, __messageProperties MAP<STRING, STRING>"
)
"""The row schema, as Spark DDL."""

_U32 = struct.Struct(">I")
# Pulsar's CompressionType values
_COMPRESSION_NONE, _COMPRESSION_LZ4, _COMPRESSION_ZLIB, _COMPRESSION_ZSTD, _COMPRESSION_SNAPPY = 0, 1, 2, 3, 4
_CODEC_NAMES = {_COMPRESSION_LZ4: "LZ4", _COMPRESSION_ZSTD: "ZSTD", _COMPRESSION_SNAPPY: "SNAPPY"}
# Pulsar refuses messages above maxMessageSize (5 MiB by default), so a real batch inflates to
# far less; a deployment that raises it past this must read with readMode=broker.
_MAX_INFLATED = 64 * 1024 * 1024

# (position key, value, key, topic, message id, publish ms, event ms or None, properties)
Row = tuple[tuple[int, int, int], bytes, "str | None", str, bytes, int, "int | None", dict[str, str]]


def spark_schema() -> Any:
    """The row schema as a Spark ``StructType`` (imports pyspark lazily)."""
    from pyspark.sql.types import StructType

    return StructType.fromDDL(SCHEMA_DDL)


def arrow_schema() -> Any:
    """The row schema as a pyarrow schema (imports pyarrow lazily)."""
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return pa.schema(
        [
            ("value", pa.binary()),
            ("__key", pa.string()),
            ("__topic", pa.string()),
            ("__messageId", pa.binary()),
            ("__publishTime", ts),
            ("__eventTime", ts),
            ("__messageProperties", pa.map_(pa.string(), pa.string())),
        ]
    )


def message_id_bytes(ledger: int, entry: int, partition: int, batch_index: int) -> bytes:
    """Pulsar's serialized message id (``MessageIdData``)."""
    mid = MessageIdData(ledgerId=ledger, entryId=entry, partition=partition, batch_index=batch_index)
    return mid.SerializeToString()


def _props(kvs: Iterable[Any]) -> dict[str, str]:
    return {kv.key: kv.value for kv in kvs}


def _inflate(data: bytes, size: int, where: str) -> bytes:
    """The ZLIB ``data`` inflated to exactly ``size`` bytes (the metadata's ``uncompressed_size``),
    never producing more: a stream that is corrupt, ends early or would grow past ``size`` (a
    few MiB can inflate to GiBs) is a ValueError."""
    if size > _MAX_INFLATED:
        raise ValueError(f"{where}: uncompressed_size {size} exceeds {_MAX_INFLATED} bytes")
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, size + 1)
    except zlib.error as exc:
        raise ValueError(f"{where}: ZLIB payload does not inflate: {exc}") from exc
    if len(out) != size or not inflater.eof:
        raise ValueError(f"{where}: ZLIB payload does not inflate to its uncompressed_size {size}")
    return out


def _decompress(codec: int, data: bytes, size: int, where: str) -> bytes:
    """An LZ4 (raw block), ZSTD (frame) or SNAPPY (raw) payload -- the formats Pulsar clients write
    -- decompressed to exactly ``size`` bytes (``uncompressed_size``) and never more; anything
    else is a ValueError. Uses ``cramjam`` (the ``spark`` extra), imported on first use."""
    name = _CODEC_NAMES[codec]
    if size > _MAX_INFLATED:
        raise ValueError(f"{where}: uncompressed_size {size} exceeds {_MAX_INFLATED} bytes")
    try:
        import cramjam
    except ImportError as exc:
        raise ValueError(
            f"{where}: {name} payloads need the cramjam package (pip install cramjam, or the "
            f"spark extra) with readMode=bookies"
        ) from exc
    try:
        if codec == _COMPRESSION_LZ4:
            out = bytes(cramjam.lz4.decompress_block(data, output_len=size)) if size else b""
            got = len(out)
        else:
            buf = bytearray(size + 1)  # one spare byte: a payload that grows past size is caught
            into = cramjam.zstd.decompress_into if codec == _COMPRESSION_ZSTD else cramjam.snappy.decompress_raw_into
            got = into(data, buf)
            out = bytes(buf[:got])
    except Exception as exc:  # cramjam raises its own DecompressionError (and ValueError/TypeError)
        raise ValueError(f"{where}: {name} payload does not decompress: {exc}") from exc
    if got != size:
        raise ValueError(f"{where}: {name} payload decompresses to {got} bytes, not its uncompressed_size {size}")
    return out


def rows_from_entry(topic: str, partition: int, ledger: int, entry: int, data: bytes) -> list[Row]:
    """Decode one stored entry (``[metadataSize][MessageMetadata][payload]``) into rows, one per
    message of a batch. Marker entries give no rows.

    Raises ``ValueError`` (and nothing else) for an entry that is not a Pulsar message (too short,
    a metadata size that overruns it, metadata that does not parse or has a ``string`` field that
    is not UTF-8, a compressed payload (ZLIB, LZ4, ZSTD, SNAPPY) that does not decompress to its
    ``uncompressed_size``, a batch that does not split), for an unknown compression and for
    encrypted messages."""
    where = f"{topic} {ledger}:{entry}"
    if len(data) < 4:
        raise ValueError(f"{where}: entry of {len(data)} bytes has no metadata size")
    (size,) = _U32.unpack_from(data, 0)
    if size > len(data) - 4:
        raise ValueError(f"{where}: metadata size {size} overruns the {len(data)}-byte entry")
    meta = MessageMetadata()
    raw = data[4 : 4 + size]
    try:
        meta.ParseFromString(raw)
    except DecodeError as exc:
        raise ValueError(f"{where}: unparsable MessageMetadata: {exc}") from exc
    bad = invalid_utf8_field(meta, raw)
    if bad is not None:
        raise ValueError(f"{where}: MessageMetadata field {bad} is not UTF-8")
    if meta.HasField("marker_type"):
        return []
    if meta.encryption_keys:
        raise ValueError(f"{topic} {ledger}:{entry}: encrypted messages cannot be read from bookies")
    payload = data[4 + size :]
    if meta.compression == _COMPRESSION_ZLIB:
        payload = _inflate(payload, meta.uncompressed_size, where)
    elif meta.compression in _CODEC_NAMES:
        payload = _decompress(meta.compression, payload, meta.uncompressed_size, where)
    elif meta.compression != _COMPRESSION_NONE:
        raise ValueError(f"{topic} {ledger}:{entry}: unknown compression {meta.compression}")
    props = _props(meta.properties)
    publish = meta.publish_time
    if not meta.HasField("num_messages_in_batch"):
        key = meta.partition_key if meta.HasField("partition_key") and meta.partition_key else None
        event = meta.event_time or None
        value = b"" if meta.null_value else payload
        return [
            (
                (ledger, entry, 0),
                value,
                key,
                topic,
                message_id_bytes(ledger, entry, partition, -1),
                publish,
                event,
                props,
            )
        ]
    out: list[Row] = []
    for i, (single, body) in enumerate(split_batch(payload, meta.num_messages_in_batch)):
        if single.compacted_out:
            continue
        key = single.partition_key if single.HasField("partition_key") and single.partition_key else None
        event = single.event_time or meta.event_time or None
        out.append(
            (
                (ledger, entry, i),
                body,
                key,
                topic,
                message_id_bytes(ledger, entry, partition, i),
                publish,
                event,
                {**props, **_props(single.properties)},
            )
        )
    return out


def _us(ms: int | None) -> int | None:
    return None if ms is None else ms * 1000


class RowBatcher:
    """Accumulates rows and yields Arrow record batches of at most ``max_rows`` rows or about
    ``max_bytes`` of values (the memory bound of one task's output buffer). With a ``value_schema``
    the batches carry its decoded field columns instead of ``value`` (see `_decode`)."""

    def __init__(self, max_rows: int = 4096, max_bytes: int = 8 << 20, value_schema: ValueSchema | None = None) -> None:
        self.max_rows, self.max_bytes = max_rows, max_bytes
        self.value_schema = value_schema
        self._decode = decoder(value_schema) if value_schema is not None else None
        self._rows: list[Row] = []
        self._bytes = 0
        self.count = 0

    def add(self, row: Row) -> Iterator[Any]:
        """Add a row; yields a record batch when the buffer is full."""
        self._rows.append(row)
        self._bytes += len(row[1])
        self.count += 1
        if len(self._rows) >= self.max_rows or self._bytes >= self.max_bytes:
            yield self.flush()

    def flush(self) -> Any:
        """The buffered rows as a ``pyarrow.RecordBatch`` (possibly empty); empties the buffer."""
        import pyarrow as pa

        rows, self._rows, self._bytes = self._rows, [], 0
        cols = list(zip(*rows, strict=True)) if rows else [()] * 8
        meta = [
            pa.array(cols[2], pa.string()),
            pa.array(cols[3], pa.string()),
            pa.array(cols[4], pa.binary()),
            pa.array([_us(v) for v in cols[5]], pa.timestamp("us", tz="UTC")),
            pa.array([_us(v) for v in cols[6]], pa.timestamp("us", tz="UTC")),
            pa.array([list(p.items()) for p in cols[7]], pa.map_(pa.string(), pa.string())),
        ]
        if self.value_schema is None or self._decode is None:
            return pa.RecordBatch.from_arrays([pa.array(cols[1], pa.binary()), *meta], schema=arrow_schema())
        columns = self.value_schema.columns
        decoded = [self._decode(v, k) for v, k in zip(cols[1], cols[2], strict=True)]
        by_column = list(zip(*decoded, strict=True)) if decoded else [()] * len(columns)
        arrays = [pa.array(list(vals), arrow_type(t)) for (_, t), vals in zip(columns, by_column, strict=True)]
        base = arrow_schema()
        schema = pa.schema([(name, arrow_type(t)) for name, t in columns] + [base.field(i) for i in range(1, 7)])
        return pa.RecordBatch.from_arrays(arrays + meta, schema=schema)
