"""Bookie protocol: wire frames, request/response constructors, entry digests, ledger
metadata, the metadata-store layout and cookies. A leaf package (protobuf, crc32c, stdlib).

Generated protobuf modules: ``bookie_protocol_pb2`` (package ``magnetar.bookie``: ``Request``,
``Response`` and their sub-messages) and ``ledger_metadata_pb2`` (``magnetar.ledger``).
"""

from __future__ import annotations

from .._errors import FrameError as FrameError
from .._errors import FrameTooLarge as FrameTooLarge
from .._errors import MalformedFrame as MalformedFrame
from . import bookie_protocol_pb2 as bookie_protocol_pb2
from . import ledger_metadata_pb2 as ledger_metadata_pb2
from ._codes import PROTOCOL_VERSION as PROTOCOL_VERSION
from ._codes import BookieInfoFlag as BookieInfoFlag
from ._codes import OperationType as OperationType
from ._codes import StatusCode as StatusCode
from ._codes import WriteFlag as WriteFlag
from ._cookie import Cookie as Cookie
from ._cookie import CookieFormatError as CookieFormatError
from ._digest import ENTRY_HEADER_SIZE as ENTRY_HEADER_SIZE
from ._digest import ENTRY_METADATA_SIZE as ENTRY_METADATA_SIZE
from ._digest import LAC_BODY_SIZE as LAC_BODY_SIZE
from ._digest import LAC_METADATA_SIZE as LAC_METADATA_SIZE
from ._digest import MAX_ENTRY_HEADER_SIZE as MAX_ENTRY_HEADER_SIZE
from ._digest import DecodedEntry as DecodedEntry
from ._digest import DigestMismatch as DigestMismatch
from ._digest import EntryDigest as EntryDigest
from ._digest import EntryHeader as EntryHeader
from ._digest import decode_entry as decode_entry
from ._digest import decode_lac as decode_lac
from ._digest import digest_for as digest_for
from ._digest import encode_entry as encode_entry
from ._digest import encode_lac as encode_lac
from ._digest import peek_entry_header as peek_entry_header
from ._errors import NoSuchEntry as NoSuchEntry
from ._errors import NoSuchLedger as NoSuchLedger
from ._fast_codec import AddRequestEncoder as AddRequestEncoder
from ._fast_codec import encode_add_response as encode_add_response
from ._fast_codec import max_add_payload as max_add_payload
from ._frames import DEFAULT_MAX_FRAME_SIZE as DEFAULT_MAX_FRAME_SIZE
from ._frames import FrameDecoder as FrameDecoder
from ._frames import encode_frame as encode_frame
from ._frames import encode_request as encode_request
from ._frames import encode_response as encode_response
from ._frames import parse_request as parse_request
from ._frames import parse_response as parse_response
from ._layout import AVAILABLE as AVAILABLE
from ._layout import COOKIES as COOKIES
from ._layout import HYBRID_SPLIT as HYBRID_SPLIT
from ._layout import IDGEN as IDGEN
from ._layout import INSTANCEID as INSTANCEID
from ._layout import LAYOUT as LAYOUT
from ._layout import LEDGER_LEVELS as LEDGER_LEVELS
from ._layout import LEDGERS as LEDGERS
from ._layout import LONG_LEVELS as LONG_LEVELS
from ._layout import MAX_LEDGER_ID as MAX_LEDGER_ID
from ._layout import READONLY as READONLY
from ._layout import SHORT_LEVELS as SHORT_LEVELS
from ._layout import UNDERREPLICATION as UNDERREPLICATION
from ._layout import LayoutFormatError as LayoutFormatError
from ._layout import LedgerLayout as LedgerLayout
from ._layout import available_path as available_path
from ._layout import cookie_path as cookie_path
from ._layout import decode_layout as decode_layout
from ._layout import encode_layout as encode_layout
from ._layout import flat_ledger_ids as flat_ledger_ids
from ._layout import id_range_of as id_range_of
from ._layout import layout_conflict as layout_conflict
from ._layout import layout_path as layout_path
from ._layout import ledger_id_from_path as ledger_id_from_path
from ._layout import ledger_ids_in as ledger_ids_in
from ._layout import ledger_level_children as ledger_level_children
from ._layout import ledger_path as ledger_path
from ._layout import ledgers_root as ledgers_root
from ._layout import level_name as level_name
from ._layout import parse_layout_name as parse_layout_name
from ._layout import readonly_path as readonly_path
from ._layout import short_ledger_id as short_ledger_id
from ._layout import short_ledger_path as short_ledger_path
from ._layout import tree_of as tree_of
from ._layout import trees as trees
from ._ledger_metadata import METADATA_FORMAT_VERSION as METADATA_FORMAT_VERSION
from ._ledger_metadata import DigestType as DigestType
from ._ledger_metadata import LedgerMetadata as LedgerMetadata
from ._ledger_metadata import LedgerState as LedgerState
from ._ledger_metadata import MetadataFormatError as MetadataFormatError
from ._ledger_metadata import Segment as Segment
from ._messages import add_request as add_request
from ._messages import add_response as add_response
from ._messages import error_response as error_response
from ._messages import force_ledger_request as force_ledger_request
from ._messages import force_ledger_response as force_ledger_response
from ._messages import get_bookie_info_request as get_bookie_info_request
from ._messages import get_bookie_info_response as get_bookie_info_response
from ._messages import operation_of as operation_of
from ._messages import read_lac_request as read_lac_request
from ._messages import read_lac_response as read_lac_response
from ._messages import read_request as read_request
from ._messages import read_response as read_response
from ._messages import request_body as request_body
from ._messages import response_body as response_body
from ._messages import write_lac_request as write_lac_request
from ._messages import write_lac_response as write_lac_response
from ._registration import BOOKIE_RPC as BOOKIE_RPC
from ._registration import BookieServiceInfo as BookieServiceInfo
from ._registration import Endpoint as Endpoint
from ._registration import RegistrationFormatError as RegistrationFormatError
from ._v2 import V2Flag as V2Flag
from ._v2 import V2Op as V2Op
from ._v2 import V2Request as V2Request
from ._v2 import encode_v2_response as encode_v2_response
from ._v2 import is_v2_payload as is_v2_payload
from ._v2 import parse_v2_request as parse_v2_request
from ._v2 import v2_status as v2_status

__all__ = [
    "AVAILABLE",
    "HYBRID_SPLIT",
    "LONG_LEVELS",
    "SHORT_LEVELS",
    "level_name",
    "tree_of",
    "trees",
    "BOOKIE_RPC",
    "BookieServiceInfo",
    "Endpoint",
    "RegistrationFormatError",
    "V2Flag",
    "V2Op",
    "V2Request",
    "encode_v2_response",
    "is_v2_payload",
    "parse_v2_request",
    "v2_status",
    "AddRequestEncoder",
    "BookieInfoFlag",
    "COOKIES",
    "Cookie",
    "CookieFormatError",
    "DEFAULT_MAX_FRAME_SIZE",
    "DecodedEntry",
    "DigestMismatch",
    "DigestType",
    "ENTRY_HEADER_SIZE",
    "ENTRY_METADATA_SIZE",
    "EntryDigest",
    "EntryHeader",
    "FrameDecoder",
    "FrameError",
    "FrameTooLarge",
    "IDGEN",
    "INSTANCEID",
    "LAC_BODY_SIZE",
    "LAC_METADATA_SIZE",
    "MAX_ENTRY_HEADER_SIZE",
    "LAYOUT",
    "LayoutFormatError",
    "LedgerLayout",
    "LEDGERS",
    "LEDGER_LEVELS",
    "LedgerMetadata",
    "LedgerState",
    "MAX_LEDGER_ID",
    "METADATA_FORMAT_VERSION",
    "MalformedFrame",
    "MetadataFormatError",
    "NoSuchEntry",
    "NoSuchLedger",
    "OperationType",
    "PROTOCOL_VERSION",
    "READONLY",
    "Segment",
    "StatusCode",
    "UNDERREPLICATION",
    "WriteFlag",
    "add_request",
    "add_response",
    "available_path",
    "bookie_protocol_pb2",
    "cookie_path",
    "decode_entry",
    "decode_lac",
    "digest_for",
    "encode_add_response",
    "encode_entry",
    "encode_frame",
    "encode_lac",
    "encode_request",
    "encode_response",
    "error_response",
    "force_ledger_request",
    "force_ledger_response",
    "get_bookie_info_request",
    "get_bookie_info_response",
    "decode_layout",
    "encode_layout",
    "flat_ledger_ids",
    "id_range_of",
    "layout_conflict",
    "layout_path",
    "ledger_id_from_path",
    "ledger_ids_in",
    "ledger_level_children",
    "ledger_metadata_pb2",
    "ledger_path",
    "ledgers_root",
    "parse_layout_name",
    "max_add_payload",
    "operation_of",
    "parse_request",
    "parse_response",
    "peek_entry_header",
    "read_lac_request",
    "read_lac_response",
    "read_request",
    "read_response",
    "readonly_path",
    "request_body",
    "response_body",
    "short_ledger_id",
    "short_ledger_path",
    "write_lac_request",
    "write_lac_response",
]
