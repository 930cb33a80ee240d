"""Handlers of lookups, namespace listings and schema requests."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import trio

from protocols.pulsar import Frame, NamespaceName, TopicName, make_command
from protocols.pulsar import pulsar_api_pb2 as pb

from .._errors import BrokerServiceError, NamespaceNotFoundError, TopicNotFoundError
from ..schema._registry import SchemaInfo, version_bytes, version_from_bytes

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._connection import ServerConnection

__all__ = [
    "handle_partitioned_metadata",
    "handle_lookup",
    "handle_topics_of_namespace",
    "filter_topics",
    "handle_get_schema",
    "handle_get_or_create_schema",
    "schema_from_proto",
    "schema_to_proto",
]


async def handle_partitioned_metadata(conn: ServerConnection, frame: Frame) -> None:
    """PARTITIONED_METADATA: always answered with ``response`` set (0 = not partitioned)."""
    req = frame.command.partitionMetadata
    topic = TopicName.parse(req.topic)
    n = await conn.service.partitioned_metadata(topic, auto_create=req.metadata_auto_creation_enabled)
    conn.send_command(
        make_command(
            "PARTITIONED_METADATA_RESPONSE",
            request_id=req.request_id,
            partitions=n,
            response=pb.CommandPartitionedTopicMetadataResponse.Success,
        )
    )


async def handle_lookup(conn: ServerConnection, frame: Frame) -> None:
    """LOOKUP: standalone owns every topic (Connect, authoritative) once the namespace exists; in a
    cluster, Connect or Redirect (authoritative) as the bundle's ownership says (`broker.cluster._ownership`)."""
    req = frame.command.lookupTopic
    topic = TopicName.parse(req.topic)
    ownership = conn.service.ownership
    # a topic this broker serves is in a namespace that exists: no metadata read for it
    served = ownership is not None and ownership.owns_topic(topic)
    if not served and not await conn.service.namespaces.namespace_exists(topic.namespace_name):
        raise NamespaceNotFoundError(f"namespace {topic.namespace_name} does not exist")
    # the listener the client connected with (listener_name=...), else the internal one; an unknown
    # name fails the lookup as in Pulsar
    listener = req.advertised_listener_name if req.HasField("advertised_listener_name") else ""
    if ownership is not None:
        answer = await ownership.lookup(
            topic, listener, bool(req.authoritative), tls=isinstance(conn.stream, trio.SSLStream)
        )
        kind = pb.CommandLookupTopicResponse.Redirect if answer.redirect else pb.CommandLookupTopicResponse.Connect
        conn.send_command(
            make_command(
                "LOOKUP_RESPONSE",
                request_id=req.request_id,
                response=kind,
                authoritative=answer.authoritative,
                proxy_through_service_url=False,
                **answer.urls,
            )
        )
        return
    urls = conn.service.lookup_urls(listener)
    conn.send_command(
        make_command(
            "LOOKUP_RESPONSE",
            request_id=req.request_id,
            response=pb.CommandLookupTopicResponse.Connect,
            authoritative=True,
            proxy_through_service_url=False,
            **urls,
        )
    )


_SCHEME = re.compile(r"^[a-z-]+://")


def filter_topics(topics: list[str], pattern: str) -> list[str] | None:
    """The topics whose partitioned-topic name matches ``pattern`` in full, both compared without
    their ``persistent://`` / ``non-persistent://`` scheme (as Pulsar's broker filters, so that a
    pattern written with or without the scheme selects the same topics); None when ``pattern`` is
    not a valid regular expression (the client then filters the whole list itself)."""
    shortened = _SCHEME.sub("", pattern.lstrip("^"))
    try:
        compiled = re.compile(shortened)
    except re.error:
        return None
    return [t for t in topics if compiled.fullmatch(_SCHEME.sub("", str(TopicName.parse(t).partitioned_topic)))]


async def handle_topics_of_namespace(conn: ServerConnection, frame: Frame) -> None:
    """GET_TOPICS_OF_NAMESPACE: the persistent topics, the loaded non-persistent ones, or both (the
    request's mode), filtered by the pattern when one is given (`filter_topics`). Pattern consumers
    send it every discovery period: the answer lists the topics that exist now (created since,
    deleted ones gone), read from the store each time so that changes made through another broker
    count too. A namespace that does not exist has no topics: an empty list, not an error, as
    Pulsar lists a namespace's stored topics without checking that it exists (the Go client
    retries an error until its operation timeout)."""
    req = frame.command.getTopicsOfNamespace
    ns = NamespaceName.parse(req.namespace)
    topics: list[str] = []
    try:
        if req.mode != pb.CommandGetTopicsOfNamespace.NON_PERSISTENT:
            topics += await conn.service.topics_of_namespace(ns)
        if req.mode != pb.CommandGetTopicsOfNamespace.PERSISTENT:
            topics += await conn.service.non_persistent_topics_of_namespace(ns)
    except NamespaceNotFoundError:
        topics = []
    filtered = False
    if req.HasField("topics_pattern") and req.topics_pattern:
        matching = filter_topics(topics, req.topics_pattern)
        if matching is not None:
            topics, filtered = matching, True
    conn.send_command(
        make_command(
            "GET_TOPICS_OF_NAMESPACE_RESPONSE",
            request_id=req.request_id,
            topics=topics,
            filtered=filtered,
            changed=True,
        )
    )


def schema_from_proto(schema: pb.Schema) -> SchemaInfo:
    """Our `SchemaInfo` of a wire Schema."""
    # protoc's stub types this as a list of Schema.KeyValue, the enum value, not the KeyValue message
    properties: Iterable[pb.KeyValue] = schema.properties
    return SchemaInfo(
        type=schema.type,
        data=schema.schema_data,
        name=schema.name,
        properties=tuple(sorted((kv.key, kv.value) for kv in properties)),
    )


def schema_to_proto(info: SchemaInfo) -> dict:
    """Fields of a wire Schema for `make_command`."""
    return {
        "name": info.name,
        "schema_data": info.data,
        "type": info.type,
        "properties": [{"key": k, "value": v} for k, v in info.properties],
    }


async def handle_get_schema(conn: ServerConnection, frame: Frame) -> None:
    """GET_SCHEMA: errors go inside GET_SCHEMA_RESPONSE (error_code)."""
    req = frame.command.getSchema
    topic = TopicName.parse(req.topic)
    version = None
    if req.HasField("schema_version") and req.schema_version:
        try:
            version = version_from_bytes(req.schema_version)
        except ValueError as exc:
            raise BrokerServiceError(str(exc), pb.IncompatibleSchema) from None
    found = await conn.service.schemas.get(topic, version)
    if found is None:
        suffix = f" version {version}" if version is not None else ""
        raise TopicNotFoundError(f"topic {topic} has no schema{suffix}")
    info, v = found
    conn.send_command(
        make_command(
            "GET_SCHEMA_RESPONSE",
            request_id=req.request_id,
            schema=schema_to_proto(info),
            schema_version=version_bytes(v),
        )
    )


async def handle_get_or_create_schema(conn: ServerConnection, frame: Frame) -> None:
    """GET_OR_CREATE_SCHEMA: the version of the schema, registering it if compatible."""
    req = frame.command.getOrCreateSchema
    topic = TopicName.parse(req.topic)
    strategy, allow_new = await conn.service.schema_strategy(topic.namespace_name)
    v = await conn.service.schemas.get_or_create(topic, schema_from_proto(req.schema), strategy, allow_new=allow_new)
    conn.send_command(
        make_command("GET_OR_CREATE_SCHEMA_RESPONSE", request_id=req.request_id, schema_version=version_bytes(v))
    )
