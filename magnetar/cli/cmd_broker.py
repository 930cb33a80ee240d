"""``magnetar broker``: a broker joining a cluster through ZooKeeper (bookies run separately).

Configuration: ``--conf broker.toml`` (tables ``[broker]``, ``[cluster]``, ``[managed_ledger]``,
``[bk_client]``; see deploy/broker.toml) or a Pulsar ``broker.conf`` (`magnetar.cli._conf_files`),
then flags, then ``--set table.key=value``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import trio

from magnetar.cli._common import fail, fail_cleanly_on, load_sections, log_stopped, run_until_signal, setup_logging
from magnetar.cli._security import broker_security_warning
from magnetar.common.config import ConfigError, config_field

if TYPE_CHECKING:
    from metadata import ZkSecurity, ZkTls


@dataclass(frozen=True)
class ClusterConfig:
    """Where the cluster's metadata lives (the ``[cluster]`` table of broker.toml)."""

    metadata_url: str = config_field(
        "zk://127.0.0.1:2181", alias="metadataStoreUrl", help="Metadata store URL: zk://host:port[,host:port]/chroot."
    )
    metadata_root: str = config_field(
        "", alias="zkLedgersRootPath", help="Cluster root of the bookies' ledgers in the store."
    )
    zk_enable_security: bool = config_field(
        False,
        alias="zkEnableSecurity",
        help="Authenticate to ZooKeeper with zkDigestCredentials and create every node with the ACL "
        "CREATOR_ALL (only that credential may read, change or delete it); every component of "
        "the cluster must use the same credential.",
    )
    zk_digest_credentials: str = config_field(
        "",
        alias="zkDigestCredentials",
        help="ZooKeeper digest credential user:password, or file:/path to a file holding it.",
    )
    metadata_store_config_path: str = config_field(
        "",
        alias="metadataStoreConfigPath",
        help="ZooKeeper client configuration file, as Pulsar's metadataStoreConfigPath: with "
        "zookeeper.client.secure=true the ZooKeeper session uses TLS (zookeeper.ssl.keyStore.location: this "
        "client's key and certificate; zookeeper.ssl.trustStore.location: the CA; PEM files). '' = plain.",
    )

    def __post_init__(self) -> None:
        self.zk_security()  # a missing or malformed credential is refused at start, naming the key
        self.zk_tls()

    def zk_security(self) -> ZkSecurity | None:
        """The ZooKeeper digest credential to open the metadata store with (None: security off)."""
        from metadata import ZkSecurity  # here: `magnetar --help` loads no kazoo

        return ZkSecurity.from_config(self.zk_enable_security, self.zk_digest_credentials)

    def zk_tls(self) -> ZkTls | None:
        """TLS to ZooKeeper from ``metadataStoreConfigPath`` (None: plain); `ConfigError` names the key."""
        from metadata import ZkTls  # here: `magnetar --help` loads no kazoo

        return ZkTls.from_config_file(self.metadata_store_config_path)


def config_sections() -> dict[str, type]:
    """The tables of broker.toml and the config class of each (imported here: ``magnetar --help``
    loads none of the server packages)."""
    from bk_client import ClientConfig
    from broker import BrokerConfig
    from managed_ledger import ManagedLedgerConfig
    from tiered_storage import TieredStorageConfig

    return {
        "cluster": ClusterConfig,
        "broker": BrokerConfig,
        "managed_ledger": ManagedLedgerConfig,
        "bk_client": ClientConfig,
        "offload": TieredStorageConfig,
    }


@click.command(name="broker")
@click.option(
    "--conf",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="TOML config file (see deploy/broker.toml), or Pulsar's broker.conf.",
)
@click.option("--metadata-url", default=None, help="Metadata store URL (zk://host:port/chroot).")
@click.option("--port", type=int, default=None, help="Pulsar protocol port (brokerServicePort).")
@click.option("--web-port", type=int, default=None, help="Admin REST port (webServicePort).")
@click.option("--set", "overrides", multiple=True, metavar="TABLE.KEY=VALUE", help="Override any config key.")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def command(
    conf: Path | None,
    metadata_url: str | None,
    port: int | None,
    web_port: int | None,
    overrides: tuple[str, ...],
    verbose: bool,
) -> None:
    """Run a broker over the bookies of a cluster."""
    from magnetar.stack import check_message_size, serve_broker_stack
    from metadata import MetadataError, open_metadata_store

    setup_logging(verbose)
    flags: dict[str, dict[str, Any]] = {"cluster": {}, "broker": {}}
    if metadata_url is not None:
        flags["cluster"]["metadata_url"] = metadata_url
    if port is not None:
        flags["broker"]["broker_service_port"] = str(port)
    if web_port is not None:
        flags["broker"]["web_service_port"] = str(web_port)
    try:
        cfg = load_sections(conf, config_sections(), overrides, flags, command="broker")
        check_message_size(cfg["broker"], cfg["bk_client"])
    except ConfigError as exc:
        fail(exc, name="broker")
    cluster: ClusterConfig = cfg["cluster"]
    warning = broker_security_warning(
        cluster.metadata_url, cfg["broker"], cfg["managed_ledger"], zk_enable_security=cluster.zk_enable_security
    )
    if warning:
        logging.getLogger("magnetar.broker").warning(warning)

    async def main(task_status: trio.TaskStatus[Any]) -> None:
        async with open_metadata_store(
            cluster.metadata_url, security=cluster.zk_security(), tls=cluster.zk_tls()
        ) as store:
            await serve_broker_stack(
                store,
                cfg["broker"],
                cfg["managed_ledger"],
                cfg["bk_client"],
                metadata_root=cluster.metadata_root,
                multi_broker=True,
                offload=cfg["offload"],
                task_status=task_status,
            )

    def started(ep: Any) -> None:
        click.echo(f"magnetar broker: {ep.service_url}  admin REST: {ep.web_url}  metadata {cluster.metadata_url}")
        if ep.service_url_tls or ep.web_url_tls:
            click.echo(f"  TLS: {ep.service_url_tls or 'off'}  admin REST TLS: {ep.web_url_tls or 'off'}")

    signal_name = fail_cleanly_on(ConfigError, OSError, MetadataError, name="broker")(trio.run)(
        run_until_signal, main, started
    )
    log_stopped("broker", signal_name or "its service ended")
