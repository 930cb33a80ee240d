"""The Apache Pulsar binary protocol, sans-IO.

Pure functions and a byte-fed decoder over the generated ``pulsar_api_pb2`` messages (package
``magnetar.pulsar``, wire compatible with Pulsar's PulsarApi.proto). Nothing here touches a
socket: the broker's trio loop feeds received bytes to :class:`FrameDecoder` and writes the
bytes the encoders return. Topic, namespace and subscription names are parsed here too
(`TopicName`), for the broker, the CLI, retention and the Spark connector alike. Imports only
protobuf, crc32c and the standard library.
"""

from .._errors import FrameError as FrameError
from .._errors import FrameTooLarge as FrameTooLarge
from .._errors import MalformedFrame as MalformedFrame
from .._utf8 import invalid_utf8_field as invalid_utf8_field
from . import pulsar_api_pb2 as pulsar_api_pb2
from . import schema_storage_pb2 as schema_storage_pb2
from . import transaction_metadata_pb2 as transaction_metadata_pb2
from ._batch import build_batch as build_batch
from ._batch import split_batch as split_batch
from ._commands import command_body as command_body
from ._commands import command_field as command_field
from ._commands import make_command as make_command
from ._commands import type_name as type_name
from ._errors import ChecksumMismatch as ChecksumMismatch
from ._errors import MalformedBatch as MalformedBatch
from ._frames import DEFAULT_MAX_FRAME_SIZE as DEFAULT_MAX_FRAME_SIZE
from ._frames import MAGIC_BROKER_ENTRY_METADATA as MAGIC_BROKER_ENTRY_METADATA
from ._frames import MAGIC_CRC32C as MAGIC_CRC32C
from ._frames import Frame as Frame
from ._frames import FrameDecoder as FrameDecoder
from ._frames import decode_frame as decode_frame
from ._frames import encode_command as encode_command
from ._frames import encode_message as encode_message
from ._frames import encode_metadata_and_payload as encode_metadata_and_payload
from ._frames import encode_payload_command as encode_payload_command
from ._frames import encode_payload_command_raw as encode_payload_command_raw
from ._frames import encode_send_receipt as encode_send_receipt
from ._frames import stored_entry_block as stored_entry_block
from ._hash import DEFAULT_HASH_RANGE_SIZE as DEFAULT_HASH_RANGE_SIZE
from ._hash import NONE_KEY as NONE_KEY
from ._hash import key_hash as key_hash
from ._hash import key_hash_slot as key_hash_slot
from ._hash import murmur3_32 as murmur3_32
from ._hash import sticky_key as sticky_key
from ._names import PARTITIONED_SUFFIX as PARTITIONED_SUFFIX
from ._names import InvalidTopicNameError as InvalidTopicNameError
from ._names import NamespaceName as NamespaceName
from ._names import TopicName as TopicName
from ._names import check_subscription_name as check_subscription_name
from .pulsar_api_pb2 import BaseCommand as BaseCommand
from .pulsar_api_pb2 import BrokerEntryMetadata as BrokerEntryMetadata
from .pulsar_api_pb2 import MessageIdData as MessageIdData
from .pulsar_api_pb2 import MessageMetadata as MessageMetadata
from .pulsar_api_pb2 import SingleMessageMetadata as SingleMessageMetadata

__all__ = [
    "DEFAULT_HASH_RANGE_SIZE",
    "DEFAULT_MAX_FRAME_SIZE",
    "MAGIC_BROKER_ENTRY_METADATA",
    "MAGIC_CRC32C",
    "NONE_KEY",
    "PARTITIONED_SUFFIX",
    "BaseCommand",
    "BrokerEntryMetadata",
    "ChecksumMismatch",
    "Frame",
    "FrameDecoder",
    "FrameError",
    "FrameTooLarge",
    "InvalidTopicNameError",
    "MalformedBatch",
    "MalformedFrame",
    "MessageIdData",
    "MessageMetadata",
    "NamespaceName",
    "SingleMessageMetadata",
    "TopicName",
    "build_batch",
    "check_subscription_name",
    "command_body",
    "command_field",
    "decode_frame",
    "encode_command",
    "encode_message",
    "encode_metadata_and_payload",
    "encode_payload_command",
    "encode_payload_command_raw",
    "encode_send_receipt",
    "invalid_utf8_field",
    "key_hash",
    "key_hash_slot",
    "make_command",
    "murmur3_32",
    "pulsar_api_pb2",
    "schema_storage_pb2",
    "transaction_metadata_pb2",
    "split_batch",
    "sticky_key",
    "stored_entry_block",
    "type_name",
]
