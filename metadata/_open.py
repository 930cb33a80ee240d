"""``open_metadata_store(url)``: pick a backend from the URL; plus small helpers over any store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

import trio

from . import _paths
from ._errors import NodeExistsError
from ._local import open_local_store
from ._security import ZkSecurity
from ._types import MetadataStore
from ._zk import open_zookeeper_store
from ._zk_tls import ZkTls


@dataclass(frozen=True)
class StoreUrl:
    """A parsed metadata store URL (see `open_metadata_store`)."""

    scheme: str
    location: str  # zk: "host:port,..."; embedded: absolute directory; memory: name
    chroot: str = ""
    session_timeout_s: float = 10.0
    connect_timeout_s: float = 10.0


_BOOKKEEPER_ZK_SCHEMES = ("zk+hierarchical", "zk+longhierarchical", "zk+flat", "zk+null")
"""BookKeeper's ``metadataServiceUri`` schemes: ZooKeeper plus the ledger manager's name (the layout
itself comes from ``ledgerManagerFactoryClass`` and the cluster's LAYOUT node)."""


def _foreign_zk_url(url: str) -> str | None:
    """``url`` in Pulsar's or BookKeeper's ZooKeeper spelling rewritten as ``zk://``, or None when it
    is in neither.

    * Pulsar's ``metadataStoreUrl``: ``zk:host:port[,host:port...][/chroot]``, or the bare
      ``host:port[,...][/chroot]`` Pulsar defaults to ZooKeeper.
    * BookKeeper's ``metadataServiceUri``: ``zk+hierarchical://host:port[;host:port...]/ledgers``,
      whose path is the ledgers node itself; Magnetar's store URL names the node that holds
      ``ledgers``, so the path must end in ``/ledgers`` (ValueError otherwise).
    """
    scheme, sep, rest = url.partition("://")
    if sep and scheme in _BOOKKEEPER_ZK_SCHEMES:
        hosts, slash, path = rest.partition("/")
        path = "/" + path.rstrip("/") if slash else ""
        if path and path != "/ledgers" and not path.endswith("/ledgers"):
            raise ValueError(
                f"metadata store url {url!r}: Magnetar keeps a cluster's ledgers in a node named "
                "ledgers (/ledgers, or /<root>/ledgers)"
            )
        return f"zk://{hosts.replace(';', ',')}{path[: -len('/ledgers')] if path else ''}"
    if sep:
        return None
    body = url[len("zk:") :] if url.startswith("zk:") else url
    hosts, slash, path = body.partition("/")
    if hosts and all(_host_port(h) for h in hosts.split(",")):
        return f"zk://{hosts}{slash}{path}"
    return None


def _host_port(text: str) -> bool:
    host, colon, port = text.strip().rpartition(":")
    return bool(colon and host and port.isdigit())


def parse_store_url(url: str) -> StoreUrl:
    """Parse and check a store URL; raises ValueError with the reason. Besides Magnetar's forms
    (`open_metadata_store`) it takes Pulsar's and BookKeeper's spellings of a ZooKeeper URL
    (`_foreign_zk_url`)."""
    url = _foreign_zk_url(url) or url
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query, strict_parsing=False).items()}
    if parts.scheme == "zk":
        if not parts.netloc:
            raise ValueError(f"metadata store url {url!r}: zk:// needs host:port[,host:port...]")
        chroot = parts.path.rstrip("/")
        if chroot:
            _paths.validate(chroot)
        unknown = set(query) - {"session_timeout_ms", "connect_timeout_ms"}
        if unknown:
            raise ValueError(f"metadata store url {url!r}: unknown parameters {sorted(unknown)}")
        try:
            session = int(query.get("session_timeout_ms", "10000")) / 1000
            connect = int(query.get("connect_timeout_ms", "10000")) / 1000
        except ValueError:
            raise ValueError(f"metadata store url {url!r}: timeouts must be integers (ms)") from None
        return StoreUrl("zk", parts.netloc, chroot, session, connect)
    if parts.scheme == "embedded":
        if parts.netloc or not parts.path.startswith("/"):
            raise ValueError(f"metadata store url {url!r}: use embedded:///absolute/directory")
        if query:
            raise ValueError(f"metadata store url {url!r}: embedded:// takes no parameters")
        return StoreUrl("embedded", parts.path)
    if parts.scheme == "memory":
        name = parts.netloc + parts.path
        if not name:
            raise ValueError(f"metadata store url {url!r}: use memory://name")
        return StoreUrl("memory", name)
    raise ValueError(f"metadata store url {url!r}: scheme must be zk://, embedded:// or memory://")


@asynccontextmanager
async def open_metadata_store(
    url: str, *, security: ZkSecurity | None = None, tls: ZkTls | None = None
) -> AsyncIterator[MetadataStore]:
    """Open a session on the store at ``url`` and close it (deleting its ephemerals) on exit.

    URL forms:

    * ``zk://host:port[,host:port...][/chroot][?session_timeout_ms=N&connect_timeout_ms=N]`` -
      ZooKeeper through kazoo; the chroot is created if missing.
    * ``embedded:///abs/dir`` - a durable sqlite store in ``dir``, owned by this process (another
      process gets StoreLockedError); stores opened on the same directory in this process share
      it, each with its own session.
    * ``memory://name`` - the same without the disk; shared by name while any store is open.

    ``security`` (ZooKeeper only; ignored by the local stores, which no other process can open
    through a session) authenticates the session with a digest credential and gives every node
    it creates the CREATOR_ALL ACL (see `ZkSecurity`).

    ``tls`` (ZooKeeper only, like ``security``) connects to ZooKeeper over TLS (see `ZkTls`).

    Raises ValueError for a malformed URL, ConnectionLossError if ZooKeeper cannot be reached.
    """
    parsed = parse_store_url(url)
    store: MetadataStore
    if parsed.scheme == "zk":
        store = await open_zookeeper_store(
            parsed.location,
            parsed.chroot,
            session_timeout_s=parsed.session_timeout_s,
            connect_timeout_s=parsed.connect_timeout_s,
            security=security,
            tls=tls,
        )
    else:
        store = await open_local_store(parsed.scheme, parsed.location)
    try:
        yield store
    finally:
        with trio.CancelScope(shield=True):
            await store.close()


async def ensure_path(store: MetadataStore, path: str) -> None:
    """Make sure ``path`` and its parents exist (as persistent empty nodes where created)."""
    if await store.exists(path) is not None:
        return
    try:
        await store.create(path, make_parents=True)
    except NodeExistsError:
        pass  # created concurrently: just as good
