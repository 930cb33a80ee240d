"""``magnetar initialize-cluster-metadata``: prepare a new cluster's metadata store, as
``pulsar initialize-cluster-metadata`` does.

It creates, each only when missing (so running it again changes nothing and says so):

* the cluster record ``/admin/clusters/{cluster}`` (Pulsar's ClusterData: web and broker URLs);
* tenant ``public`` (allowed on the cluster) and namespace ``public/default``, plus the
  ``pulsar/system`` namespace Pulsar creates, and in it the transaction coordinators' partitioned
  topic ``transaction_coordinator_assign`` (``--num-transaction-coordinators``, 16 as in Pulsar);
* BookKeeper's ledger layout under the ledgers root: ``LAYOUT`` (hierarchical, BookKeeper's default),
  ``INSTANCEID`` (a fresh UUID, only while no bookie has written a cookie: a cookie carries the
  instance id it was written with, so adding one later would lock existing bookies out) and the
  ``available``/``readonly`` registration parents.

Exit status 0 when initialised or already initialised, 2 for bad arguments, 3 when the store
cannot be reached.
"""

from __future__ import annotations

import uuid

import click
import trio

from magnetar.cli._common import EXIT_CONFIG, EXIT_START

LAYOUT_VALUE = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"
"""BookKeeper's LAYOUT record (format version 2, manager factory class:version), as
``bookkeeper shell initnewcluster`` writes it by default."""


async def initialize(
    url: str,
    cluster: str,
    *,
    web_url: str,
    web_url_tls: str,
    broker_url: str,
    broker_url_tls: str,
    metadata_root: str,
    transaction_coordinators: int = 16,
) -> list[str]:
    """Create what is missing; return one line per item saying whether it was created or found."""
    from broker import ClusterResources, NamespaceName, NamespaceResources, cluster_data
    from metadata import NodeExistsError, NoNodeError, open_metadata_store
    from protocols.bookkeeper import AVAILABLE, COOKIES, INSTANCEID, LAYOUT, READONLY, ledgers_root

    report: list[str] = []
    async with open_metadata_store(url) as store:
        clusters = ClusterResources(store)
        data = cluster_data(
            web_service_url=web_url,
            web_service_url_tls=web_url_tls,
            broker_service_url=broker_url,
            broker_service_url_tls=broker_url_tls,
        )
        if await clusters.create(cluster, data):
            report.append(f"created cluster {cluster} ({web_url or '-'}, {broker_url or '-'})")
        else:
            existing = await clusters.get(cluster) or {}
            same = all(existing.get(k) == v for k, v in data.items() if v)
            report.append(
                f"cluster {cluster} exists"
                + (
                    ""
                    if same
                    else f" with other URLs ({existing.get('serviceUrl')}, {existing.get('brokerServiceUrl')}): "
                    "kept; change it with the admin API"
                )
            )
        namespaces = NamespaceResources(store, cluster)
        for tenant, ns in (("public", "public/default"), ("pulsar", "pulsar/system")):
            try:
                await namespaces.create_tenant(tenant, {"adminRoles": [], "allowedClusters": [cluster]})
                report.append(f"created tenant {tenant}")
            except NodeExistsError:
                report.append(f"tenant {tenant} exists")
            try:
                await namespaces.create_namespace(NamespaceName.parse(ns))
                report.append(f"created namespace {ns}")
            except NodeExistsError:
                report.append(f"namespace {ns} exists")
        if transaction_coordinators > 0:
            from broker.transactions.coordinator import ASSIGN_TOPIC

            try:
                await namespaces.create_partitioned_topic(ASSIGN_TOPIC, transaction_coordinators)
                report.append(f"created {ASSIGN_TOPIC} with {transaction_coordinators} partitions")
            except NodeExistsError:
                report.append(f"{ASSIGN_TOPIC} exists")
        root = ledgers_root(metadata_root)
        for path in (f"{root}/{AVAILABLE}", f"{root}/{AVAILABLE}/{READONLY}"):
            try:
                await store.create(path, b"", make_parents=True)
            except NodeExistsError:
                pass
        try:
            await store.create(f"{root}/{LAYOUT}", LAYOUT_VALUE, make_parents=True)
            report.append(f"created ledger layout {root}/{LAYOUT}")
        except NodeExistsError:
            report.append(f"ledger layout {root}/{LAYOUT} exists")
        if await store.exists(f"{root}/{INSTANCEID}") is not None:
            report.append(f"instance id {root}/{INSTANCEID} exists")
        else:
            try:
                cookies = await store.children(f"{root}/{COOKIES}")
            except NoNodeError:
                cookies = []
            if cookies:
                report.append(f"no instance id written: {len(cookies)} bookie(s) already have cookies without one")
            else:
                try:
                    await store.create(f"{root}/{INSTANCEID}", str(uuid.uuid4()).encode(), make_parents=True)
                    report.append(f"created instance id {root}/{INSTANCEID}")
                except NodeExistsError:
                    report.append(f"instance id {root}/{INSTANCEID} exists")
    return report


@click.command(name="initialize-cluster-metadata")
@click.option("-c", "--cluster", required=True, help="Cluster name.")
@click.option(
    "-md",
    "--metadata-store",
    "metadata_store",
    default=None,
    help="Metadata store URL (zk://host:port[/chroot], embedded:///dir).",
)
@click.option(
    "-zk",
    "--zookeeper",
    "zookeeper",
    default=None,
    help="ZooKeeper host:port[,host:port] (Pulsar's older flag; same as --metadata-store zk://...).",
)
@click.option(
    "-cms",
    "--configuration-metadata-store",
    "--configuration-store",
    "configuration_store",
    default=None,
    help="Configuration store: Magnetar keeps one store, so it must equal --metadata-store.",
)
@click.option("-uw", "--web-service-url", default="", help="Brokers' admin REST URL (http://host:8080[,host:8080]).")
@click.option("-tw", "--web-service-url-tls", default="", help="Brokers' admin REST URL over TLS.")
@click.option("-ub", "--broker-service-url", default="", help="Brokers' service URL (pulsar://host:6650[,host:6650]).")
@click.option("-tb", "--broker-service-url-tls", default="", help="Brokers' service URL over TLS.")
@click.option("--metadata-root", default="", help="Cluster root of the ledgers in the store (zkLedgersRootPath).")
@click.option(
    "--num-transaction-coordinators",
    "transaction_coordinators",
    type=click.IntRange(min=0),
    default=16,
    show_default=True,
    help="Partitions of pulsar/system/transaction_coordinator_assign: one transaction coordinator each "
    "(0: do not create the topic).",
)
def command(
    cluster: str,
    metadata_store: str | None,
    zookeeper: str | None,
    configuration_store: str | None,
    web_service_url: str,
    web_service_url_tls: str,
    broker_service_url: str,
    broker_service_url_tls: str,
    metadata_root: str,
    transaction_coordinators: int,
) -> None:
    """Create the cluster, tenant public, namespace public/default and the ledger layout (idempotent)."""
    from broker import ClusterResources

    def bad(message: str) -> None:
        click.echo(f"error: {message}", err=True)
        raise SystemExit(EXIT_CONFIG)

    if zookeeper and metadata_store:
        bad("give --metadata-store or --zookeeper, not both")
    url = metadata_store or (f"zk://{zookeeper.removeprefix('zk:').lstrip('/')}" if zookeeper else None)
    if not url:
        bad("--metadata-store (or --zookeeper) is required")
        return

    def bare(u: str) -> str:
        return u.removeprefix("zk:").lstrip("/")

    if configuration_store and bare(configuration_store) != bare(url):
        bad(
            "Magnetar keeps configuration and metadata in one store: --configuration-metadata-store must "
            "equal --metadata-store"
        )
    try:
        ClusterResources.check_name(cluster)
    except ValueError as exc:
        bad(str(exc))
    for flag, value, schemes in (
        ("--web-service-url", web_service_url, ("http://",)),
        ("--web-service-url-tls", web_service_url_tls, ("https://",)),
        ("--broker-service-url", broker_service_url, ("pulsar://",)),
        ("--broker-service-url-tls", broker_service_url_tls, ("pulsar+ssl://",)),
    ):
        if value and not value.startswith(schemes):
            bad(f"{flag} must start with {schemes[0]}, got {value!r}")
    try:
        report = trio.run(
            lambda: initialize(
                url,
                cluster,
                web_url=web_service_url,
                web_url_tls=web_service_url_tls,
                broker_url=broker_service_url,
                broker_url_tls=broker_service_url_tls,
                metadata_root=metadata_root,
                transaction_coordinators=transaction_coordinators,
            )
        )
    except ValueError as exc:
        bad(str(exc))
        return
    except Exception as exc:  # the store is unreachable or refuses: nothing more to do than say so
        click.echo(f"error: cannot initialize {url}: {type(exc).__name__}: {exc}", err=True)
        raise SystemExit(EXIT_START) from None
    for line in report:
        click.echo(f"  {line}")
    created = any(line.startswith("created") for line in report)
    click.echo(
        f"Cluster metadata for '{cluster}' "
        + ("initialized." if created else "was already initialized: nothing changed.")
    )
