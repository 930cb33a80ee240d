"""Lookups of a topic this broker serves are answered from the bundles it holds
(`broker.cluster._lookup`), with no metadata read.

Found by the chaos runs in test hosts: every lookup (and every admin request on a topic, which
goes through the same owner check) read the namespace policies and the ownership node from
ZooKeeper. A session's reads wait behind its writes (cursor and ledger updates), so on a loaded
ZooKeeper lookups took 1.3-3.7 s on a broker at 3 % CPU, and ownership was reported as not
converged. Here the store stops answering once the bundle is owned, as a ZooKeeper that does not
answer in time: the owner still answers.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from broker import Ownership
from broker.resources._bundles import bundle_for
from metadata import ConnectionLossError, open_metadata_store
from protocols.pulsar import NamespaceName, TopicName

TOPIC = TopicName.parse("persistent://public/ns/t")
OTHER = TopicName.parse("persistent://public/other/t")
URL = "pulsar://127.0.0.1:6650"


class _Namespaces:
    reachable = True

    async def get_policies(self, ns: NamespaceName) -> dict[str, Any]:
        if not self.reachable:
            raise ConnectionLossError(f"read {ns}: the store does not answer", str(ns))
        return {"bundles": {"numBundles": 4}}


async def test_the_owner_answers_lookups_of_its_topics_without_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    namespaces = _Namespaces()
    service = SimpleNamespace(
        web_service_url="http://127.0.0.1:8080",
        web_service_url_tls="",
        service_url=URL,
        service_url_tls="",
        advertised_listeners={},
        internal_listener_name="",
        namespaces=namespaces,
        lookup_urls=lambda listener: {"brokerServiceUrl": URL},
    )
    async with open_metadata_store("memory://lookup-from-memory") as store:
        own = Ownership(service, store)  # type: ignore[arg-type]  # what lookups read of a service
        own.registered = True  # as after `run` registered
        bundle = bundle_for(await own.namespace_boundaries(TOPIC.namespace_name), str(TOPIC))
        assert await own.acquire(TOPIC.namespace_name, bundle, "taken for the test")

        async def unreachable(path: str, *args: Any, **kwargs: Any) -> Any:
            raise ConnectionLossError(f"read {path}: the store does not answer", path)

        for read in ("get", "exists", "children"):
            monkeypatch.setattr(store, read, unreachable)
        namespaces.reachable = False

        answer = await own.lookup(TOPIC, "", authoritative=False)
        assert not answer.redirect and answer.urls == {"brokerServiceUrl": URL}
        assert await own.admin_target(TOPIC) is None  # admin requests on it are served here
        # a topic of a bundle it does not hold still needs the store (and says so)
        with pytest.raises(ConnectionLossError):
            await own.lookup(OTHER, "", authoritative=False)
