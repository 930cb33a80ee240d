"""Errors of the broker service, each carrying the Pulsar ``ServerError`` code the client sees."""

from __future__ import annotations

from protocols.pulsar import pulsar_api_pb2 as pb

__all__ = [
    "BrokerServiceError",
    "TopicNotFoundError",
    "NamespaceNotFoundError",
    "ServiceNotReadyError",
    "ProducerBusyError",
    "ConsumerBusyError",
    "IncompatibleSchemaError",
    "NotAllowedError",
]


class BrokerServiceError(Exception):
    """A request failed in a way the client is told about; ``code`` is a ``ServerError`` value."""

    code: int = pb.UnknownError

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message


class TopicNotFoundError(BrokerServiceError):
    """The topic does not exist and may not be created (auto-creation off, or no such namespace)."""

    code = pb.TopicNotFound


class NamespaceNotFoundError(TopicNotFoundError):
    """The topic's tenant or namespace does not exist in the metadata store."""


class ServiceNotReadyError(BrokerServiceError):
    """The topic is being loaded/unloaded, or storage failed: the client should retry."""

    code = pb.ServiceNotReady


class ProducerBusyError(BrokerServiceError):
    """The producer name is taken, or an exclusive producer holds the topic."""

    code = pb.ProducerBusy


class ConsumerBusyError(BrokerServiceError):
    """An exclusive subscription already has a consumer, or the subscription type differs."""

    code = pb.ConsumerBusy


class IncompatibleSchemaError(BrokerServiceError):
    """A schema is not compatible with the topic's schemas under the namespace's strategy."""

    code = pb.IncompatibleSchema


class NotAllowedError(BrokerServiceError):
    """The operation is not allowed (for example a Key_Shared subscription while it is disabled)."""

    code = pb.NotAllowedError
