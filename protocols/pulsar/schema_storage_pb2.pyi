from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StoredPosition(_message.Message):
    __slots__ = ("ledgerId", "entryId")
    LEDGERID_FIELD_NUMBER: _ClassVar[int]
    ENTRYID_FIELD_NUMBER: _ClassVar[int]
    ledgerId: int
    entryId: int
    def __init__(self, ledgerId: _Optional[int] = ..., entryId: _Optional[int] = ...) -> None: ...

class IndexEntry(_message.Message):
    __slots__ = ("version", "position", "hash")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    version: int
    position: StoredPosition
    hash: bytes
    def __init__(self, version: _Optional[int] = ..., position: _Optional[_Union[StoredPosition, _Mapping]] = ..., hash: _Optional[bytes] = ...) -> None: ...

class SchemaEntry(_message.Message):
    __slots__ = ("schema_data", "index")
    SCHEMA_DATA_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    schema_data: bytes
    index: _containers.RepeatedCompositeFieldContainer[IndexEntry]
    def __init__(self, schema_data: _Optional[bytes] = ..., index: _Optional[_Iterable[_Union[IndexEntry, _Mapping]]] = ...) -> None: ...

class SchemaLocator(_message.Message):
    __slots__ = ("info", "index")
    INFO_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    info: IndexEntry
    index: _containers.RepeatedCompositeFieldContainer[IndexEntry]
    def __init__(self, info: _Optional[_Union[IndexEntry, _Mapping]] = ..., index: _Optional[_Iterable[_Union[IndexEntry, _Mapping]]] = ...) -> None: ...

class StoredSchemaInfo(_message.Message):
    __slots__ = ("schema_id", "user", "type", "schema", "timestamp", "deleted", "props")
    class KeyValuePair(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SCHEMA_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    PROPS_FIELD_NUMBER: _ClassVar[int]
    schema_id: str
    user: str
    type: int
    schema: bytes
    timestamp: int
    deleted: bool
    props: _containers.RepeatedCompositeFieldContainer[StoredSchemaInfo.KeyValuePair]
    def __init__(self, schema_id: _Optional[str] = ..., user: _Optional[str] = ..., type: _Optional[int] = ..., schema: _Optional[bytes] = ..., timestamp: _Optional[int] = ..., deleted: _Optional[bool] = ..., props: _Optional[_Iterable[_Union[StoredSchemaInfo.KeyValuePair, _Mapping]]] = ...) -> None: ...
