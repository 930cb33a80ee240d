"""``magnetar admin`` offload (tiered storage) commands, named and flagged as ``pulsar-admin``'s.

Namespaces: ``set-offload-threshold`` / ``get-offload-threshold``,
``set-offload-threshold-in-seconds`` / ``get-...``, ``set-offload-deletion-lag`` / ``get-...`` /
``clear-offload-deletion-lag``, ``set-offload-policies`` / ``get-offload-policies`` /
``remove-offload-policies``. Topics: ``offload`` (``--size-threshold``: keep that many bytes on the
bookies, offload the ledgers before them, computed from ``stats-internal`` as pulsar-admin does),
``offload-status`` (``-w`` waits), ``set-offload-policies`` / ``get-offload-policies`` (``--applied``) /
``remove-offload-policies``. Registered on the ``namespaces`` and ``topics`` groups when `cmd_admin`
imports this module.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from magnetar.common.durations import parse_duration

from ._admin_api import NS_ARG, TOPIC_ARG, AdminApi, admin_command, emit, ns_path, size_bytes, topic_rest_path
from ._admin_namespaces import namespaces
from ._admin_topics import topics

__all__: list[str] = []

_STATUS_TEXT = {
    "NOT_RUN": "Offload has not been run",
    "RUNNING": "Offload is running",
    "SUCCESS": "Offload was a success",
    "ERROR": "Error in offload",
}


def _millis(text: str) -> int:
    """``3600000`` (ms), ``90s``, ``10m``, ``4h``, ``1d`` -> milliseconds (a bare number is ms)."""
    try:
        value = parse_duration(text, bare_unit="ms")
    except ValueError:
        raise click.BadParameter(f"invalid time {text!r}: use milliseconds or a number with s/m/h/d") from None
    if value < 0:
        raise click.BadParameter(f"invalid time {text!r}: must not be negative")
    return round(value * 1000)


def _seconds(text: str) -> int:
    """``-1``, ``3600`` (s), ``10m``, ``4h``, ``1d`` -> seconds (-1: off)."""
    try:
        value = parse_duration(text)
    except ValueError:
        raise click.BadParameter(f"invalid time {text!r}: use -1, seconds or a number with s/m/h/d") from None
    return -1 if value < 0 else int(value)


def _threshold(text: str) -> int:
    return -1 if text.strip() == "-1" else size_bytes(text)


# ------------------------------------------------------------------ namespaces


@admin_command(
    namespaces,
    "set-offload-threshold",
    NS_ARG,
    click.option(
        "--size",
        "-s",
        required=True,
        help="Bytes a topic keeps on bookies before older ledgers are offloaded (bytes or "
        "K/M/G/T; 0 = offload every closed ledger; -1 = off).",
    ),
)
def namespaces_set_offload_threshold(api: AdminApi, namespace: str, size: str) -> None:
    """Set the namespace's automatic offload threshold in bytes."""
    value = _threshold(size)
    api.do("PUT", ns_path(namespace, "/offloadThreshold"), f"set offload threshold of {namespace} to {value}", value)


@admin_command(namespaces, "get-offload-threshold", NS_ARG)
def namespaces_get_offload_threshold(api: AdminApi, namespace: str) -> None:
    """Show the namespace's offload threshold in bytes (-1: off)."""
    emit(api, api.call("GET", ns_path(namespace, "/offloadThreshold")))


@admin_command(
    namespaces,
    "set-offload-threshold-in-seconds",
    NS_ARG,
    click.option(
        "--time",
        "-t",
        "time_",
        required=True,
        help="Offload ledgers closed longer ago than this (seconds, or with s/m/h/d; -1 = off).",
    ),
)
def namespaces_set_offload_threshold_seconds(api: AdminApi, namespace: str, time_: str) -> None:
    """Set the namespace's age-based offload threshold."""
    value = _seconds(time_)
    api.do(
        "PUT",
        ns_path(namespace, "/offloadThresholdInSeconds"),
        f"set offload threshold in seconds of {namespace} to {value}",
        value,
    )


@admin_command(namespaces, "get-offload-threshold-in-seconds", NS_ARG)
def namespaces_get_offload_threshold_seconds(api: AdminApi, namespace: str) -> None:
    """Show the namespace's age-based offload threshold (-1: off)."""
    emit(api, api.call("GET", ns_path(namespace, "/offloadThresholdInSeconds")))


@admin_command(
    namespaces,
    "set-offload-deletion-lag",
    NS_ARG,
    click.option(
        "--lag", "-l", required=True, help="How long an offloaded ledger keeps its bookie copy (ms, or with s/m/h/d)."
    ),
)
def namespaces_set_offload_deletion_lag(api: AdminApi, namespace: str, lag: str) -> None:
    """Set how long offloaded ledgers stay on the bookies too."""
    value = _millis(lag)
    api.do(
        "PUT",
        ns_path(namespace, "/offloadDeletionLagMs"),
        f"set offload deletion lag of {namespace} to {value} ms",
        value,
    )


@admin_command(namespaces, "get-offload-deletion-lag", NS_ARG)
def namespaces_get_offload_deletion_lag(api: AdminApi, namespace: str) -> None:
    """Show the namespace's offload deletion lag in ms (nothing when unset)."""
    emit(api, api.call("GET", ns_path(namespace, "/offloadDeletionLagMs")))


@admin_command(namespaces, "clear-offload-deletion-lag", NS_ARG)
def namespaces_clear_offload_deletion_lag(api: AdminApi, namespace: str) -> None:
    """Remove the namespace's deletion lag (the broker's applies)."""
    api.do("DELETE", ns_path(namespace, "/offloadDeletionLagMs"), f"cleared the offload deletion lag of {namespace}")


_POLICY_OPTIONS = (
    click.option("--driver", "-d", required=True, help="Offload driver: filesystem, aws-s3 or S3."),
    click.option("--region", "-r", default=None, help="Region (aws-s3 / S3)."),
    click.option("--bucket", "-b", default=None, help="Bucket (aws-s3 / S3)."),
    click.option("--endpoint", "-e", default=None, help="Endpoint of an S3-compatible service."),
    click.option("--aws-id", "-i", "aws_id", default=None, help="Access key id (aws-s3 / S3)."),
    click.option("--aws-secret", "-s", "aws_secret", default=None, help="Secret access key (aws-s3 / S3)."),
    click.option(
        "--fileSystemURI",
        "--file-system-uri",
        "file_system_uri",
        default=None,
        help="Directory of the filesystem driver (file:///path).",
    ),
    click.option(
        "--maxBlockSizeInBytes", "-m", "max_block", default=None, help="Bytes per uploaded part (bytes or K/M/G)."
    ),
    click.option(
        "--readBufferSizeInBytes",
        "-rb",
        "read_buffer",
        default=None,
        help="Bytes per block read back (bytes or K/M/G).",
    ),
    click.option(
        "--offloadAfterThreshold",
        "-t",
        "threshold",
        default=None,
        help="Bytes kept on bookies before offloading (bytes or K/M/G/T; -1 = off).",
    ),
    click.option(
        "--offloadAfterThresholdInSeconds",
        "-ts",
        "threshold_s",
        default=None,
        help="Offload ledgers closed longer ago (seconds or s/m/h/d; -1 = off).",
    ),
    click.option(
        "--offloadAfterElapsed",
        "-oae",
        "lag",
        default=None,
        help="Deletion lag: how long offloaded ledgers stay on bookies (ms or s/m/h/d).",
    ),
    click.option(
        "--offloadedReadPriority",
        "-orp",
        "priority",
        default=None,
        type=click.Choice(["tiered-storage-first", "bookkeeper-first"]),
        help="Where ledgers on both tiers are read from.",
    ),
)


def _policies_body(
    driver: str,
    region: str | None,
    bucket: str | None,
    endpoint: str | None,
    aws_id: str | None,
    aws_secret: str | None,
    file_system_uri: str | None,
    max_block: str | None,
    read_buffer: str | None,
    threshold: str | None,
    threshold_s: str | None,
    lag: str | None,
    priority: str | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "managedLedgerOffloadDriver": driver,
        "managedLedgerOffloadRegion": region,
        "managedLedgerOffloadBucket": bucket,
        "managedLedgerOffloadServiceEndpoint": endpoint,
        "s3ManagedLedgerOffloadCredentialId": aws_id,
        "s3ManagedLedgerOffloadCredentialSecret": aws_secret,
        "fileSystemURI": file_system_uri,
        "managedLedgerOffloadMaxBlockSizeInBytes": size_bytes(max_block) if max_block else None,
        "managedLedgerOffloadReadBufferSizeInBytes": size_bytes(read_buffer) if read_buffer else None,
        "managedLedgerOffloadThresholdInBytes": _threshold(threshold) if threshold else None,
        "managedLedgerOffloadThresholdInSeconds": _seconds(threshold_s) if threshold_s else None,
        "managedLedgerOffloadDeletionLagInMillis": _millis(lag) if lag else None,
        "managedLedgerOffloadedReadPriority": priority,
    }
    return {k: v for k, v in body.items() if v is not None}


@admin_command(namespaces, "set-offload-policies", NS_ARG, *_POLICY_OPTIONS)
def namespaces_set_offload_policies(api: AdminApi, namespace: str, **opts: Any) -> None:
    """Set the namespace's offload policies (driver, location, thresholds)."""
    api.do(
        "POST", ns_path(namespace, "/offloadPolicies"), f"set offload policies of {namespace}", _policies_body(**opts)
    )


@admin_command(namespaces, "get-offload-policies", NS_ARG)
def namespaces_get_offload_policies(api: AdminApi, namespace: str) -> None:
    """Show the namespace's offload policies (nothing when unset)."""
    emit(api, _set_fields(api.call("GET", ns_path(namespace, "/offloadPolicies"))))


@admin_command(namespaces, "remove-offload-policies", NS_ARG)
def namespaces_remove_offload_policies(api: AdminApi, namespace: str) -> None:
    """Remove the namespace's offload policies."""
    api.do("DELETE", ns_path(namespace, "/removeOffloadPolicies"), f"removed the offload policies of {namespace}")


def _set_fields(doc: Any) -> Any:
    return {k: v for k, v in doc.items() if v is not None} if isinstance(doc, dict) else doc


# ------------------------------------------------------------------ topics


def first_ledger_within_threshold(ledgers: list[dict[str, Any]], threshold: int) -> dict[str, int] | None:
    """The message id before which everything is offloaded so that at most ``threshold`` bytes stay
    on the bookies (pulsar-admin's rule: walk the ledgers newest first, summing sizes; the ledger
    after the one that crosses the threshold starts what is kept). None when nothing would go."""
    if not ledgers:
        return None
    newest_first = list(reversed(ledgers))
    suffix = 0
    previous = int(newest_first[0]["ledgerId"])
    for info in newest_first:
        suffix += int(info["size"])
        if suffix > threshold:
            return {"ledgerId": previous, "entryId": 0, "partitionIndex": -1}
        previous = int(info["ledgerId"])
    return None


@admin_command(
    topics,
    "offload",
    TOPIC_ARG,
    click.option(
        "--size-threshold",
        "-s",
        "size",
        required=True,
        help="Keep this many bytes on the bookies and offload the ledgers before them (bytes or K/M/G/T).",
    ),
)
def topics_offload(api: AdminApi, topic: str, size: str) -> None:
    """Offload a topic's older ledgers to tiered storage (in the background: see offload-status)."""
    threshold = size_bytes(size)
    stats = api.call("GET", f"{topic_rest_path(topic)}/internalStats") or {}
    mid = first_ledger_within_threshold(list(stats.get("ledgers") or []), threshold)
    if mid is None:
        click.echo("Nothing to offload")
        return
    api.do(
        "PUT",
        f"{topic_rest_path(topic)}/offload",
        f"Offload triggered for {topic} for messages before {mid['ledgerId']}:{mid['entryId']}",
        mid,
    )


@admin_command(
    topics,
    "offload-status",
    TOPIC_ARG,
    click.option("--wait-complete", "-w", "wait", is_flag=True, help="Wait while the offload is running."),
)
def topics_offload_status(api: AdminApi, topic: str, wait: bool) -> None:
    """Show the last offload's status (NOT_RUN, RUNNING, SUCCESS, ERROR and its reason) and the first
    message still only on bookies. Exits with an error when it failed."""
    status = api.call("GET", f"{topic_rest_path(topic)}/offload") or {}
    while wait and status.get("status") == "RUNNING":
        time.sleep(1)
        status = api.call("GET", f"{topic_rest_path(topic)}/offload") or {}
    if api.as_json:
        click.echo(json.dumps(status, sort_keys=True))
    state = status.get("status", "")
    first = status.get("firstUnoffloadedMessage") or {}
    where = f"{first.get('ledgerId')}:{first.get('entryId')}"
    if state == "ERROR":
        raise click.ClickException(
            f"{_STATUS_TEXT['ERROR']}: {status.get('lastError') or 'unknown reason'} "
            f"(first message not offloaded: {where})"
        )
    if not api.as_json:
        click.echo(
            _STATUS_TEXT.get(state, state) + (f" (first message not offloaded: {where})" if state == "SUCCESS" else "")
        )


@admin_command(topics, "set-offload-policies", TOPIC_ARG, *_POLICY_OPTIONS)
def topics_set_offload_policies(api: AdminApi, topic: str, **opts: Any) -> None:
    """Set a topic's own offload policies (they override the namespace's field by field)."""
    api.do(
        "POST", f"{topic_rest_path(topic)}/offloadPolicies", f"set offload policies of {topic}", _policies_body(**opts)
    )


@admin_command(
    topics,
    "get-offload-policies",
    TOPIC_ARG,
    click.option("--applied", "-ap", is_flag=True, help="The policies in force (topic > namespace > broker)."),
)
def topics_get_offload_policies(api: AdminApi, topic: str, applied: bool) -> None:
    """Show a topic's offload policies."""
    doc = api.call("GET", f"{topic_rest_path(topic)}/offloadPolicies", params={"applied": str(applied).lower()})
    emit(api, _set_fields(doc))


@admin_command(topics, "remove-offload-policies", TOPIC_ARG)
def topics_remove_offload_policies(api: AdminApi, topic: str) -> None:
    """Remove a topic's own offload policies."""
    api.do("DELETE", f"{topic_rest_path(topic)}/offloadPolicies", f"removed the offload policies of {topic}")
