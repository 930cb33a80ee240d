"""ZooKeeper digest authentication and CREATOR_ALL ACLs (``ZkSecurity``) against a real ZooKeeper:
nodes a secured session creates (the chroot, parents made on the way, transaction creates,
ephemerals) can be neither read, changed, deleted nor given children by a session without the
credential or with another one; a second session with the same credential can do everything."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError as KazooNoAuth
from kazoo.security import CREATOR_ALL_ACL

from magnetar.common.config import ConfigError
from metadata import Create, NoAuthError, ZkSecurity, open_metadata_store
from tests.support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

SECURE = ZkSecurity("magnetar:s3cret")


def _chroot(zk_url: str) -> str:
    return "/" + zk_url.split("/", 3)[3].split("?")[0]


async def test_nodes_are_closed_to_sessions_without_the_credential(zookeeper: ZooKeeperServer, zk_url: str) -> None:
    async with open_metadata_store(zk_url, security=SECURE) as owner:
        await owner.create("/ledgers/00/0000/L0001", b"ledger", make_parents=True)
        await owner.create("/ledgers/available/b1", b"", ephemeral=True, make_parents=True)
        await owner.transaction([Create("/managed-ledgers", b"tx")])

        for who in (None, ZkSecurity("magnetar:wrong"), ZkSecurity("intruder:s3cret")):
            async with open_metadata_store(zk_url, security=who) as other:
                for path in ("/ledgers/00/0000/L0001", "/managed-ledgers"):
                    with pytest.raises(NoAuthError):
                        await other.get(path)
                    with pytest.raises(NoAuthError):
                        await other.set(path, b"forged", version=-1)
                with pytest.raises(NoAuthError):
                    await other.delete("/ledgers/available/b1")  # needs DELETE on the parent
                with pytest.raises(NoAuthError):
                    await other.delete("/managed-ledgers")
                with pytest.raises(NoAuthError):
                    await other.create("/ledgers/available/fake-bookie", b"", ephemeral=True)
                with pytest.raises(NoAuthError):
                    await other.create("/intruder", b"")  # under the chroot, which the owner made
                with pytest.raises(NoAuthError):
                    await other.children("/ledgers")

        # the same credential in another session (another component of the cluster) may do it all
        async with open_metadata_store(zk_url, security=ZkSecurity("magnetar:s3cret")) as peer:
            data, stat = await peer.get("/ledgers/00/0000/L0001")
            assert data == b"ledger"
            await peer.set("/ledgers/00/0000/L0001", b"changed", version=stat.version)
            assert await peer.children("/ledgers/available") == ["b1"]
            await peer.delete("/managed-ledgers")

    # what ZooKeeper stores: the creator's digest identity with every permission
    chroot = _chroot(zk_url)
    client = KazooClient(hosts=zookeeper.hosts, auth_data=[("digest", "magnetar:s3cret")])
    client.start(timeout=10)
    try:
        for path in (chroot, f"{chroot}/ledgers", f"{chroot}/ledgers/00/0000/L0001"):
            acls, _ = client.get_acls(path)
            assert len(acls) == 1
            assert acls[0].perms == CREATOR_ALL_ACL[0].perms
            assert acls[0].id.scheme == "digest" and acls[0].id.id.startswith("magnetar:")
    finally:
        client.stop()
        client.close()
    anonymous = KazooClient(hosts=zookeeper.hosts)
    anonymous.start(timeout=10)
    try:
        with pytest.raises(KazooNoAuth):
            anonymous.delete(f"{chroot}/ledgers", recursive=True)
    finally:
        anonymous.stop()
        anonymous.close()


def test_config_keys(tmp_path: Path) -> None:
    assert ZkSecurity.from_config(False, "") is None
    with pytest.raises(ConfigError) as e:
        ZkSecurity.from_config(True, "")
    assert e.value.key == "zkDigestCredentials"
    with pytest.raises(ConfigError) as e:
        ZkSecurity.from_config(True, "no-colon")
    assert e.value.key == "zkDigestCredentials"
    with pytest.raises(ConfigError) as e:
        ZkSecurity.from_config(True, f"file:{tmp_path / 'missing'}")
    assert e.value.key == "zkDigestCredentials"
    secret = tmp_path / "zk.cred"
    secret.write_text("magnetar:from-file\n")
    security = ZkSecurity.from_config(True, f"file:{secret}")
    assert security is not None and security.digest == "magnetar:from-file"
    assert "from-file" not in repr(security)  # the password never reaches a log line
