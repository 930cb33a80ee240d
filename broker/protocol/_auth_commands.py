"""Which Pulsar protocol commands need which permission (the rules are `_authz`'s).

PRODUCER needs ``produce`` (and, naming an initial subscription, what SUBSCRIBE needs for it);
SUBSCRIBE ``consume`` and, when its namespace lists roles for the subscription name, one of them
(`AuthorizationService.check_subscription`); LOOKUP, PARTITIONED_METADATA and GET_SCHEMA either;
GET_OR_CREATE_SCHEMA ``produce``; GET_TOPICS_OF_NAMESPACE (pattern subscriptions)
``consume`` granted on the namespace itself, as Pulsar's GET_TOPICS namespace operation.
Commands on an already authorized producer or consumer (SEND, FLOW, ACK, SEEK, ...) need nothing
more. A refusal raises `AuthorizationError`, which the dispatcher answers with the request's own
error response: the connection stays usable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocols.pulsar import Frame, NamespaceName, TopicName
from protocols.pulsar import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from ._connection import ServerConnection

__all__ = ["AUTHORIZED_COMMANDS", "authorize_command"]

T = pb.BaseCommand
_EITHER = ("produce", "consume")

AUTHORIZED_COMMANDS: dict[int, tuple[str, tuple[str, ...]]] = {
    T.GET_TOPICS_OF_NAMESPACE: ("getTopicsOfNamespace", ("consume",)),
    T.PRODUCER: ("producer", ("produce",)),
    T.SUBSCRIBE: ("subscribe", ("consume",)),
    T.LOOKUP: ("lookupTopic", _EITHER),
    T.PARTITIONED_METADATA: ("partitionMetadata", _EITHER),
    T.GET_SCHEMA: ("getSchema", _EITHER),
    T.GET_OR_CREATE_SCHEMA: ("getOrCreateSchema", ("produce",)),
}
"""command type -> (body field, actions of which one is needed)."""


async def authorize_command(conn: ServerConnection, frame: Frame) -> None:
    """Raise `AuthorizationError` when ``conn``'s role may not run ``frame`` (module rules)."""
    authz = conn.service.authz
    entry = AUTHORIZED_COMMANDS.get(frame.type)
    if not authz.enabled or entry is None:
        return
    field, actions = entry
    role = conn.auth_session.role
    if frame.type == T.GET_TOPICS_OF_NAMESPACE:
        await authz.check_namespace(role, NamespaceName.parse(frame.command.getTopicsOfNamespace.namespace), *actions)
        return
    body = getattr(frame.command, field)
    topic = TopicName.parse(body.topic)
    await authz.check(role, topic, *actions)
    if frame.type == T.SUBSCRIBE:
        await authz.check_subscription(role, topic, body.subscription)
    if frame.type == T.PRODUCER and body.initial_subscription_name:
        # the producer creates a subscription: Pulsar checks that as a subscribe
        await authz.check(role, topic, "consume")
        await authz.check_subscription(role, topic, body.initial_subscription_name)
