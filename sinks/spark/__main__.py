"""``python -m sinks.spark pipelines list|remove``: the durable subscriptions of Spark queries.

    python -m sinks.spark pipelines list --admin-url http://127.0.0.1:8080 [--namespace public/default]
    python -m sinks.spark pipelines remove --admin-url ... --idle-for 7d [--dry-run]
    python -m sinks.spark pipelines remove --admin-url ... --checkpoint /path/to/checkpoint
    python -m sinks.spark pipelines remove --admin-url ... --subscription magnetar-spark-1a2b3c4d5e6f

``--option pulsar.client.authParams=...`` (repeatable) gives the admin REST's TLS and
authentication as the data source's options do. See `_pipelines` for what is listed.
"""

from __future__ import annotations

import json
import sys

import click

from ._admin import AdminClient
from ._pipelines import checkpoint_subscription, find_pipelines, parse_duration, remove_pipeline
from ._security import ClientSecurity

_admin_url = click.option("--admin-url", required=True, help="The broker's admin REST URL.")
_namespace = click.option("--namespace", "namespaces", multiple=True, help="tenant/namespace (default: all).")
_option = click.option(
    "--option",
    "options",
    multiple=True,
    help="pulsar.client.* (or pulsar.admin.*) TLS/auth key=value for the admin REST.",
)


def _admin(url: str, options: tuple[str, ...]) -> AdminClient:
    opts = {}
    for item in options:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r}: expected key=value", param_hint="--option")
        opts[key.strip().lower()] = value
    admin_given = any(k.startswith("pulsar.admin.") for k in opts)
    security = ClientSecurity.parse(opts, "pulsar.admin." if admin_given else "pulsar.client.")
    return AdminClient(url, security=security)


@click.group()
def main() -> None:
    """Tools of the magnetar Spark data source."""


@main.group()
def pipelines() -> None:
    """The durable subscriptions Spark queries keep (and leave behind when stopped for good)."""


@pipelines.command("list")
@_admin_url
@_namespace
@_option
@click.option("--idle-for", help="Only those without a heartbeat for this long (90s, 30m, 2h, 7d).")
@click.option("--json", "as_json", is_flag=True, help="JSON lines.")
def list_(
    admin_url: str, namespaces: tuple[str, ...], options: tuple[str, ...], idle_for: str | None, as_json: bool
) -> None:
    """List query subscriptions: name, pipeline, idle time, backlog, topics."""
    admin = _admin(admin_url, options)
    try:
        found = find_pipelines(admin, namespaces or None)
    finally:
        admin.close()
    limit = parse_duration(idle_for) if idle_for else None
    for p in found:
        if limit is not None and p.idle_s() < limit:
            continue
        if as_json:
            click.echo(json.dumps(p.to_json(), sort_keys=True))
        else:
            click.echo(
                f"{p.name}\tidle {int(p.idle_s())}s\tbacklog {p.backlog}\t{p.pipeline}\t"
                f"{len(p.topics)} topic(s): {', '.join(p.topics[:3])}{' ...' if len(p.topics) > 3 else ''}"
            )


@pipelines.command("remove")
@_admin_url
@_namespace
@_option
@click.option("--idle-for", help="Remove those without a heartbeat for this long (90s, 30m, 2h, 7d).")
@click.option("--checkpoint", help="Remove the subscription this query checkpoint names.")
@click.option("--subscription", help="Remove this subscription (it must be a query's).")
@click.option("--dry-run", is_flag=True, help="Only say what would be removed.")
def remove(
    admin_url: str,
    namespaces: tuple[str, ...],
    options: tuple[str, ...],
    idle_for: str | None,
    checkpoint: str | None,
    subscription: str | None,
    dry_run: bool,
) -> None:
    """Remove query subscriptions: by idleness, by checkpoint or by name (exactly one)."""
    if sum(x is not None for x in (idle_for, checkpoint, subscription)) != 1:
        raise click.UsageError("give exactly one of --idle-for, --checkpoint, --subscription")
    if checkpoint is not None:
        try:
            subscription = checkpoint_subscription(checkpoint)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        if subscription is None:
            click.echo(f"{checkpoint} names no durable subscription")
            return
    limit = parse_duration(idle_for) if idle_for else None
    admin = _admin(admin_url, options)
    try:
        chosen = [
            p
            for p in find_pipelines(admin, namespaces or None)
            if (limit is not None and p.idle_s() >= limit) or p.name == subscription
        ]
        for p in chosen:
            if dry_run:
                click.echo(f"would remove {p.name} from {len(p.topics)} topic(s) (backlog {p.backlog})")
            else:
                n = remove_pipeline(admin, p)
                click.echo(f"removed {p.name} from {n} topic(s) (backlog {p.backlog})")
    finally:
        admin.close()
    if subscription is not None and not chosen:
        click.echo(f"no query subscription named {subscription}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
