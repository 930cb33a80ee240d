"""Ownership (`broker.cluster._ownership` Rule 1): an ownership node this broker's own session holds but
never recorded - its creation's caller was cancelled after the store had created it, or an
unload's delete failed - is this broker's. Found by the chaos run: such a bundle answered "held by
this broker's previous session until it expires" to every lookup for as long as the session
lived, and its topics were never served again."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from broker import Ownership
from broker._errors import ServiceNotReadyError
from broker.resources._bundles import bundle_for
from metadata import open_metadata_store
from protocols.pulsar import NamespaceName, TopicName

TOPIC = TopicName.parse("persistent://public/ns/t")
URL = "pulsar://127.0.0.1:6650"


class _Namespaces:
    async def get_policies(self, ns: NamespaceName) -> dict[str, Any]:
        return {"bundles": {"numBundles": 4}}


def _service() -> Any:
    return SimpleNamespace(
        web_service_url="http://127.0.0.1:8080",
        web_service_url_tls="",
        service_url=URL,
        service_url_tls="",
        advertised_listeners={},
        internal_listener_name="",
        namespaces=_Namespaces(),
        lookup_urls=lambda listener: {"brokerServiceUrl": URL},
    )


async def test_a_node_of_this_session_that_was_never_recorded_is_served() -> None:
    async with open_metadata_store("memory://ownership-unrecorded") as store:
        own = Ownership(_service(), store)
        own.registered = True  # as after `run` registered
        bundle = bundle_for(await own.namespace_boundaries(TOPIC.namespace_name), str(TOPIC))
        # the store created the node, but the acquire that asked for it was cancelled before it
        # recorded the bundle
        await store.create(
            own.bundles.owner_path(TOPIC.namespace_name, bundle),
            json.dumps(own.owner_info()).encode(),
            ephemeral=True,
            make_parents=True,
        )
        assert own.owned == {}
        answer = await own.lookup(TOPIC, "", authoritative=False)
        assert not answer.redirect and answer.urls == {"brokerServiceUrl": URL}
        assert own.owns_topic(TOPIC)
        assert own.decisions[-1]["action"] == "assigned" and "unrecorded" in own.decisions[-1]["reason"]
        # acquire agrees: taking a bundle whose node this session holds succeeds
        own.owned.clear()
        assert await own.acquire(TOPIC.namespace_name, bundle, "again")
        assert own.owns_topic(TOPIC)


async def test_a_node_of_another_session_of_this_broker_is_still_waited_out() -> None:
    async with open_metadata_store("memory://ownership-previous") as store:
        own = Ownership(_service(), store)
        own.registered = True
        bundle = bundle_for(await own.namespace_boundaries(TOPIC.namespace_name), str(TOPIC))
        async with open_metadata_store("memory://ownership-previous") as previous:  # an earlier session
            await previous.create(
                own.bundles.owner_path(TOPIC.namespace_name, bundle),
                json.dumps(own.owner_info()).encode(),
                ephemeral=True,
                make_parents=True,
            )
            with pytest.raises(ServiceNotReadyError, match="previous session"):  # the client retries
                await own.lookup(TOPIC, "", authoritative=False)
            assert not await own.acquire(TOPIC.namespace_name, bundle, "taken")
