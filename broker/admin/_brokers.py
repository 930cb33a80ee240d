"""Broker health and readiness: ``/admin/v2/brokers/health``, ``/admin/v2/brokers/ready``, ``/status.html``.

Rules:

* Rule 1 (health): ``GET /admin/v2/brokers/health`` writes a heartbeat message to this broker's
  heartbeat topic and reads it back, as Pulsar's health check does; 200 ``ok`` (text) when the
  message read back is the one written, else 500 ``{"reason": ...}`` (503 while the broker is not
  ready, 500 when the round trip exceeds `HEALTH_CHECK_TIMEOUT_S`). The topic is Pulsar's
  ``persistent://pulsar/{brokerId}/healthcheck`` (``topicVersion=V2``, the default) or
  ``persistent://pulsar/{cluster}/{brokerId}/healthcheck`` (``V1``: a three-level namespace,
  which Magnetar does not have, so V1 is refused with 412), ``brokerId`` being ``host:port`` of
  this broker's admin service.
* Rule 2 (where it goes): the message is written through the heartbeat topic's managed ledger
  (the path every SEND's entry takes, bookies included) and read back by position through the
  managed ledger's read path; no client connection is involved, so a broker whose protocol port
  is saturated still answers. The heartbeat namespace (and tenant ``pulsar``) is created on the
  first health check, not at start: a broker never checked keeps no heartbeat data at all.
* Rule 3 (bounded storage): the heartbeat namespace gets retention ``0``/``0`` when it is created
  (overriding any broker default retention): the topic has no subscription, so every closed
  ledger of it is deletable and the periodic retention pass trims it; an idle open ledger is
  rolled by that pass too. Storage is therefore at most about one ledger of heartbeat entries
  (each well under 100 bytes) between retention passes. Pulsar instead deletes the health
  check's subscription after each check and relies on its default retention; we chose explicit
  namespace retention so that an operator's broker-wide ``defaultRetention*`` cannot make it grow.
* Rule 4 (ready): ``GET /admin/v2/brokers/ready`` answers 200 ``ok`` once `BrokerService.ready`
  (service running, protocol port listening, not stopping), else 503 ``{"reason": ...}``.
* Rule 5 (status.html): Pulsar's load-balancer status page: 200 ``OK`` (text) while the broker is
  ready, else 404 (as Pulsar's status servlet answers when the broker cannot take traffic).
  Pulsar's ``statusFilePath`` (take a broker out of rotation by removing a file) is not supported.
* Authorization (see `_auth`): ``/status.html`` and ``/admin/v2/brokers/ready`` are open (probes
  carry no credentials); the health check, which writes, needs a super user as in Pulsar.
"""

from __future__ import annotations

import logging
import time
import uuid

import trio
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from protocols.pulsar import MessageMetadata, NamespaceName, TopicName, encode_metadata_and_payload

from ._common import RestError, endpoint, service_of

__all__ = ["HEALTH_CHECK_TIMEOUT_S", "heartbeat_topic", "routes"]

log = logging.getLogger("broker.admin")

HEALTH_CHECK_TIMEOUT_S = 30.0
HEARTBEAT_TENANT = "pulsar"
HEARTBEAT_LOCAL_NAME = "healthcheck"
_PRODUCER_NAME = "magnetar-health-check"


def heartbeat_topic(broker_id: str) -> TopicName:
    """This broker's heartbeat topic (Pulsar's V2 form) for ``broker_id`` = ``host:port``."""
    return TopicName.parse(f"persistent://{HEARTBEAT_TENANT}/{broker_id}/{HEARTBEAT_LOCAL_NAME}")


async def _ensure_heartbeat_namespace(request: Request, ns: NamespaceName) -> None:
    s = service_of(request)
    if await s.namespaces.namespace_exists(ns):
        return
    await s.namespaces.ensure_namespace(ns)
    await s.namespaces.update_policies(
        ns, {"retention_policies": {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}}
    )
    log.info("created the heartbeat namespace %s (retention 0/0)", ns)


@endpoint
async def health(request: Request) -> Response:
    s = service_of(request)
    version = request.query_params.get("topicVersion", "V2")
    if version.upper() == "V1":
        raise RestError(412, "topicVersion V1 (pulsar/{cluster}/{broker} namespaces) is not supported; use V2")
    if version.upper() != "V2":
        raise RestError(400, f"topicVersion must be V1 or V2, not {version!r}")
    if not s.ready:
        raise RestError(503, "Broker is not ready")
    topic_name = heartbeat_topic(service_of(request).broker_id)
    payload = f"{uuid.uuid4()}-{int(s.clock() * 1000)}".encode()
    started = time.monotonic()
    with trio.move_on_after(HEALTH_CHECK_TIMEOUT_S) as scope:
        await _ensure_heartbeat_namespace(request, topic_name.namespace_name)
        topic = await s.get_topic(topic_name, create=True, admin=True)
        md = MessageMetadata(producer_name=_PRODUCER_NAME, sequence_id=0, publish_time=int(s.clock() * 1000))
        data = encode_metadata_and_payload(md, payload)
        position = await topic.ml.add_entry(data)
        entry = await topic.ml.read_entry(position)
    if scope.cancelled_caught:
        raise RestError(500, f"health check timed out after {HEALTH_CHECK_TIMEOUT_S:.0f} s on {topic_name}")
    if entry.data != data:
        raise RestError(500, f"health check on {topic_name}: read back a different message at {position}")
    log.debug("health check on %s ok in %.3f s", topic_name, time.monotonic() - started)
    return PlainTextResponse("ok")


@endpoint
async def ready(request: Request) -> Response:
    if not service_of(request).ready:
        raise RestError(503, "Broker is not ready")
    return PlainTextResponse("ok")


async def status_html(request: Request) -> Response:
    if not service_of(request).ready:
        return PlainTextResponse("Not Found", status_code=404)
    return PlainTextResponse("OK")


def routes() -> list[Route]:
    """The routes of this module."""
    return [
        Route("/admin/v2/brokers/health", health, methods=["GET"]),
        Route("/admin/v2/brokers/ready", ready, methods=["GET"]),
        Route("/status.html", status_html, methods=["GET"]),
    ]
