"""``magnetar autorecovery``: run an auditor candidate and replication workers against a cluster.

    magnetar autorecovery --metadata-url zk://127.0.0.1:2181 --root /magnetar --conf magnetar.toml \
        --set lostBookieRecoveryDelay=60

Settings come from the ``[autorecovery]`` table of ``--conf`` and ``--set key=value`` overrides
(``autorecovery.AutoRecoveryConfig``); the bookie client's settings from ``[bk_client]``. SIGINT or
SIGTERM stops the process cleanly (locks released, auditor vote withdrawn).
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from typing import Any

import click
import trio

from autorecovery import AutoRecoveryConfig, run_autorecovery
from bk_client import ClientConfig
from magnetar.common.config import ConfigError, load_config, parse_overrides, read_toml

from ._conf_files import read_conf, route_properties, unimplemented_warning


async def _main(url: str, root: str, config: AutoRecoveryConfig, client: ClientConfig) -> None:
    async with trio.open_nursery() as nursery:
        ar = await nursery.start(
            lambda task_status: run_autorecovery(url, root, config, client_config=client, task_status=task_status)
        )
        click.echo(
            f"autorecovery {ar.identity} running on {url} root {root or '/'} "
            f"({config.replication_workers} workers, "
            f"auditor {'on' if config.auditor_enabled else 'off'})"
        )
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                break
        nursery.cancel_scope.cancel()


@click.command(name="autorecovery")
@click.option("--metadata-url", required=True, help="zk://host:port/chroot, embedded:///dir or memory://name")
@click.option("--root", default="", show_default=True, help="cluster root inside the metadata store")
@click.option(
    "--conf",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML file with [autorecovery] and [bk_client] tables, or BookKeeper's bk_server.conf",
)
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="override an [autorecovery] key")
@click.option("-v", "--verbose", is_flag=True, help="log at DEBUG level")
def command(metadata_url: str, root: str, conf: str | None, overrides: tuple[str, ...], verbose: bool) -> None:
    """Run AutoRecovery: the auditor (when elected) and replication workers."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        conf_file = read_conf(Path(conf)) if conf else None
        tables: dict[str, Any] = {}
        properties: dict[str, dict[str, str]] = {"autorecovery": {}, "bk_client": {}}
        if conf_file is not None and conf_file.properties is not None:  # a bk_server.conf
            properties, ignored = route_properties(
                conf_file.properties, {"autorecovery": AutoRecoveryConfig, "bk_client": ClientConfig}
            )
            if ignored:
                logging.getLogger("magnetar").warning(
                    "%s", unimplemented_warning("autorecovery", conf_file.path, ignored)
                )
        elif conf_file is not None:
            tables = {name: read_toml(conf_file.path, name) for name in ("autorecovery", "bk_client")}
        config = load_config(
            AutoRecoveryConfig,
            tables.get("autorecovery", {}),
            parse_overrides(overrides),
            section="autorecovery",
            properties=properties["autorecovery"],
        )
        client = load_config(
            ClientConfig, tables.get("bk_client", {}), section="bk_client", properties=properties["bk_client"]
        )
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    trio.run(_main, metadata_url, root, config, client)
