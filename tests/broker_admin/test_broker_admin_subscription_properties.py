"""Subscription properties over the admin REST (Pulsar's ``ResetCursorData.properties`` at creation,
``GET``/``PUT .../subscription/{sub}/properties``): kept in the cursor's record across an unload,
and shown by explain-storage, with the ``pipeline`` property naming who pins which ledgers."""

from __future__ import annotations

import httpx
import pulsar

from tests.broker_admin.admin_harness import AdminBroker

V2 = "/admin/v2"


def test_properties_at_creation_update_and_explain(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    tp = f"{V2}/persistent/public/default/{name}"
    producer = client.create_producer(name, batching_enabled=False)
    first = producer.send(b"m0")
    for i in range(1, 5):
        producer.send(f"m{i}".encode())
    producer.close()

    body = {
        "ledgerId": first.ledger_id(),
        "entryId": first.entry_id(),
        "properties": {"pipeline": "spark job A", "owner": "etl"},
    }
    assert http.put(f"{tp}/subscription/pipe", json=body).status_code == 204
    assert http.get(f"{tp}/subscription/pipe/properties").json() == {"pipeline": "spark job A", "owner": "etl"}
    # a body with properties only starts at the latest position, as a body-less create does
    assert http.put(f"{tp}/subscription/late", json={"properties": {"x": "1"}}).status_code == 204
    backlogs = {n: s["msgBacklog"] for n, s in http.get(f"{tp}/stats").json()["subscriptions"].items()}
    assert backlogs == {"pipe": 5, "late": 0}

    explain = http.get(f"{tp}/explain-storage").json()
    assert explain["cursors"]["pipe"]["pipeline"] == "spark job A"
    assert explain["cursors"]["pipe"]["properties"]["owner"] == "etl"
    assert explain["cursors"]["pipe"]["pinsLedgers"]
    assert explain["cursors"]["late"]["pipeline"] is None

    # PUT replaces every property; the record keeps them across an unload
    assert http.put(f"{tp}/subscription/pipe/properties", json={"pipeline": "spark job B"}).status_code == 204
    assert http.put(f"{tp}/unload").status_code == 204
    assert http.get(f"{tp}/subscription/pipe/properties").json() == {"pipeline": "spark job B"}
    assert http.get(f"{tp}/explain-storage").json()["cursors"]["pipe"]["pipeline"] == "spark job B"

    assert http.put(f"{tp}/subscription/pipe/properties", json={"n": 1}).status_code == 400
    assert http.get(f"{tp}/subscription/nope/properties").status_code == 404
    assert http.put(f"{tp}/subscription/nope/properties", json={}).status_code == 404


def test_properties_of_a_partitioned_topic(broker: AdminBroker, http: httpx.Client, name: str) -> None:
    tp = f"{V2}/persistent/public/default/{name}"
    assert http.put(f"{tp}/partitions", json=2).status_code == 204
    assert (
        http.put(
            f"{tp}/subscription/s", json={"ledgerId": -1, "entryId": -1, "properties": {"pipeline": "p"}}
        ).status_code
        == 204
    )
    assert http.get(f"{tp}/subscription/s/properties").json() == {"pipeline": "p"}
    assert http.put(f"{tp}/subscription/s/properties", json={"pipeline": "q"}).status_code == 204
    for i in range(2):
        assert http.get(f"{tp}-partition-{i}/subscription/s/properties").json() == {"pipeline": "q"}
