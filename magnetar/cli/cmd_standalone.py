"""``magnetar standalone``: the broker, bookies and an embedded metadata store in one process.

Data lives under ``--data-dir`` (default ``./data``); a restart finds every topic, subscription
and message where it was. Configuration: ``--conf standalone.toml`` (tables ``[standalone]``,
``[broker]``, ``[bookie]``, ``[managed_ledger]``, ``[bk_client]``; see deploy/standalone.toml) or a
Pulsar ``standalone.conf`` (`magnetar.cli._conf_files`), then flags, then ``--set table.key=value``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import trio

from magnetar.cli._common import fail, fail_cleanly_on, load_sections, log_stopped, run_until_signal, setup_logging
from magnetar.common.config import ConfigError


@click.command(name="standalone")
@click.option(
    "--conf",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="TOML config file (see deploy/standalone.toml), or Pulsar's standalone.conf.",
)
@click.option("--data-dir", default=None, help="Directory for all data (default ./data).")
@click.option("--bookies", "num_bookies", type=int, default=None, help="Number of bookies (default 1).")
@click.option("--set", "overrides", multiple=True, metavar="TABLE.KEY=VALUE", help="Override any config key.")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def command(
    conf: Path | None, data_dir: str | None, num_bookies: int | None, overrides: tuple[str, ...], verbose: bool
) -> None:
    """Run standalone Magnetar: Pulsar protocol on 6650, admin REST on 8080, bookie on 3181."""
    from bk_client import ClientConfig
    from bookie import BookieConfig, BookieFatalError, CookieMismatchError
    from broker import BrokerConfig
    from magnetar.stack import STANDALONE_DEFAULTS, StandaloneConfig, check_message_size, serve_standalone
    from managed_ledger import ManagedLedgerConfig
    from metadata import MetadataError
    from tiered_storage import TieredStorageConfig

    setup_logging(verbose)
    flags: dict[str, dict[str, Any]] = {"standalone": {}}
    if data_dir is not None:
        flags["standalone"]["data_dir"] = data_dir
    if num_bookies is not None:
        flags["standalone"]["num_bookies"] = str(num_bookies)
    try:
        cfg = load_sections(
            conf,
            {
                "standalone": StandaloneConfig,
                "broker": BrokerConfig,
                "bookie": BookieConfig,
                "managed_ledger": ManagedLedgerConfig,
                "bk_client": ClientConfig,
                "offload": TieredStorageConfig,
            },
            overrides,
            flags,
            defaults=STANDALONE_DEFAULTS,
            command="standalone",
        )
        cfg["standalone"].validate()
        check_message_size(cfg["broker"], cfg["bk_client"], cfg["bookie"])
    except ConfigError as exc:
        fail(exc, name="standalone")

    async def main(task_status: trio.TaskStatus[Any]) -> None:
        await serve_standalone(
            cfg["standalone"],
            cfg["broker"],
            cfg["bookie"],
            cfg["managed_ledger"],
            cfg["bk_client"],
            offload=cfg["offload"],
            task_status=task_status,
        )

    def started(ep: Any) -> None:
        click.echo(f"magnetar standalone: data in {ep.data_dir}, metadata {ep.metadata_url}")
        for b in ep.bookies:
            click.echo(f"  bookie {b.bookie_id}: protocol {b.host}:{b.port}, http {', '.join(b.http_urls)}")
        click.echo(f"  broker: {ep.broker.service_url}  admin REST: {ep.broker.web_url}")
        if ep.broker.service_url_tls or ep.broker.web_url_tls:
            click.echo(
                f"  broker TLS: {ep.broker.service_url_tls or 'off'}  admin REST TLS: {ep.broker.web_url_tls or 'off'}"
            )
        click.echo("ready (Ctrl-C to stop)")

    run = fail_cleanly_on(
        ConfigError,
        CookieMismatchError,
        BookieFatalError,
        OSError,
        MetadataError,
        name="standalone",
        fatal=(BookieFatalError,),
    )(trio.run)
    log_stopped("standalone", run(run_until_signal, main, started) or "its services ended")
