"""Pulsar's producer access modes on one topic: who attaches, who waits, who is fenced.

Shared by the persistent topic (`_topic`, Rule 2) and the non-persistent one (`_nonpersistent`):
both keep their producers in a name -> `Producer` dict and their parked WaitForExclusive
producers in a list, and hand both to these functions, which decide and edit them. What differs
is left to the topic: how an exclusive grant gets its epoch (stored in the managed ledger, or kept
in memory) and how a promotion runs (in the topic's nursery, or at once).

The rules, as Pulsar's broker applies them:

* Shared producers coexist; one is refused (ProducerBusy) while an exclusive producer holds the
  topic or one waits for it.
* Exclusive is refused (ProducerFenced) while any other producer is connected or waiting.
* WaitForExclusive is parked while any producer is connected, and promoted, oldest first, once
  the topic has none (`next_to_promote`).
* ExclusiveWithFencing closes every other producer (CLOSE_PRODUCER), fails every parked one
  (ProducerFenced), then takes the topic.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from protocols.pulsar import pulsar_api_pb2 as pb

from .._errors import BrokerServiceError, NotAllowedError, ProducerBusyError
from ._producer import AccessMode, Producer

__all__ = ["Admission", "OnReady", "Waiting", "admit", "fenced", "next_to_promote"]

OnReady = Callable[[BrokerServiceError | None], None]
"""Called once for a parked producer: None when it holds the topic, else the error refusing it."""

Waiting = list[tuple[Producer, OnReady]]


class Admission(Enum):
    """What `admit` decided."""

    ATTACHED = "attached"  # a Shared producer, now in the producers dict
    PARKED = "parked"  # a WaitForExclusive producer, now in the waiting list
    EXCLUSIVE = "exclusive"  # the caller grants the epoch, then attaches it


def fenced(message: str) -> BrokerServiceError:
    """The ProducerFenced error Pulsar clients expect for a refused or displaced exclusive producer."""
    return BrokerServiceError(message, pb.ProducerFenced)


def admit(
    topic: str, producers: dict[str, Producer], waiting: Waiting, producer: Producer, on_ready: OnReady
) -> Admission:
    """Apply ``producer``'s access mode to the topic's ``producers`` and ``waiting`` (module
    docstring). ATTACHED and PARKED edit them; EXCLUSIVE leaves ``producer`` out for the caller to
    grant it an epoch and attach it, after the fencing of ExclusiveWithFencing has been done here.

    Raises `ProducerBusyError`, `BrokerServiceError` (ProducerFenced) or `NotAllowedError` (an
    unknown mode); nothing is changed then.
    """
    holder = next((p for p in producers.values() if p.exclusive), None)
    held_by = f": {holder.name}" if holder else ""
    mode = producer.access_mode
    if mode == AccessMode.SHARED:
        if holder is not None or waiting:
            raise ProducerBusyError(f"topic {topic} has an existing exclusive producer{held_by}")
        producers[producer.name] = producer
        return Admission.ATTACHED
    if mode == AccessMode.EXCLUSIVE:
        if holder is not None or waiting:
            raise fenced(f"topic {topic} has an existing exclusive producer{held_by}")
        if producers:
            raise fenced(f"topic {topic} has existing shared producers")
    elif mode == AccessMode.WAIT_FOR_EXCLUSIVE:
        if producers:
            waiting.append((producer, on_ready))
            return Admission.PARKED
    elif mode == AccessMode.EXCLUSIVE_WITH_FENCING:
        parked, waiting[:] = list(waiting), []
        for other, callback in parked:
            other.closed = True
            callback(fenced(f"producer {other.name!r} fenced out of topic {topic}"))
        for other in list(producers.values()):
            other.close_from_broker()
            producers.pop(other.name, None)
    else:
        raise NotAllowedError(f"unknown producer access mode {mode}")
    return Admission.EXCLUSIVE


def next_to_promote(producers: dict[str, Producer], waiting: Waiting) -> tuple[Producer, OnReady] | None:
    """The oldest parked producer, taken off ``waiting``, once the topic has no producer left;
    None otherwise. The caller grants it the topic (and attaches it)."""
    if producers or not waiting:
        return None
    return waiting.pop(0)
