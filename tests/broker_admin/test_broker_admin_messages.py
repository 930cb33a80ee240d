"""Message reads and expiry over the admin REST (peek, examine, get by id, last id, expire), with
messages produced by the official client."""

from __future__ import annotations

import time

import httpx
import pulsar
import pytest

from tests.broker_admin.admin_harness import AdminBroker


def _produce(client: pulsar.Client, topic: str, n: int, **kwargs) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False, producer_name="p1")
    ids = [producer.send(f"m{i}".encode(), properties={"i": str(i)}, partition_key=f"k{i}", **kwargs) for i in range(n)]
    producer.close()
    return ids


def _id(mid: pulsar.MessageId) -> str:
    return f"{mid.ledger_id()}:{mid.entry_id()}"


def test_last_message_id_and_get_message_by_id(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    path = f"/admin/v2/persistent/public/default/{name}"
    ids = _produce(client, name, 3)
    last = http.get(f"{path}/lastMessageId").json()
    assert last == {"ledgerId": ids[-1].ledger_id(), "entryId": ids[-1].entry_id(), "partitionIndex": -1}

    before = int(time.time() * 1000)
    r = http.get(f"{path}/ledger/{ids[1].ledger_id()}/entry/{ids[1].entry_id()}")
    assert r.status_code == 200 and r.content == b"m1"
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["X-Pulsar-Message-ID"] == _id(ids[1])
    assert r.headers["X-Pulsar-producer-name"] == "p1"
    assert r.headers["X-Pulsar-sequence-id"] == "1"
    assert r.headers["X-Pulsar-partition-key"] == "k1"
    assert r.headers["X-Pulsar-PROPERTY-i"] == "1"
    published = r.headers["X-Pulsar-publish-time"]
    assert published.endswith("Z") and published[:4] == time.strftime("%Y", time.gmtime(before / 1000))

    assert http.get(f"{path}/ledger/{ids[-1].ledger_id()}/entry/{ids[-1].entry_id() + 1}").status_code == 404
    assert http.get(f"{path}/ledger/99999/entry/0").status_code == 404
    assert http.get(f"{path}/ledger/x/entry/0").status_code == 400
    assert http.get(f"/admin/v2/persistent/public/default/{name}-missing/lastMessageId").status_code == 404


def test_peek_examine_and_expire(broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str) -> None:
    path = f"/admin/v2/persistent/public/default/{name}"
    consumer = client.subscribe(name, "sub", initial_position=pulsar.InitialPosition.Earliest)
    ids = _produce(client, name, 5)
    # ack the first message and the third individually: peek counts what is still unacknowledged
    first = consumer.receive(timeout_millis=5000)
    consumer.acknowledge(first)
    consumer.receive(timeout_millis=5000)
    third = consumer.receive(timeout_millis=5000)
    consumer.acknowledge(third)
    deadline = time.time() + 5
    while http.get(f"{path}/stats").json()["subscriptions"]["sub"]["msgBacklog"] != 3 and time.time() < deadline:
        time.sleep(0.05)
    r = http.get(f"{path}/subscription/sub/position/1")
    assert r.status_code == 200 and r.content == b"m1" and r.headers["X-Pulsar-Message-ID"] == _id(ids[1])
    r = http.get(f"{path}/subscription/sub/position/2")
    assert r.content == b"m3" and r.headers["X-Pulsar-Message-ID"] == _id(ids[3])
    assert http.get(f"{path}/subscription/sub/position/3").content == b"m4"
    assert http.get(f"{path}/subscription/sub/position/4").status_code == 404
    assert http.get(f"{path}/subscription/sub/position/0").status_code == 412
    assert http.get(f"{path}/subscription/nosub/position/1").status_code == 404

    assert http.get(f"{path}/examinemessage").content == b"m4"  # latest, position 1
    r = http.get(f"{path}/examinemessage", params={"initialPosition": "earliest", "messagePosition": 2})
    assert r.content == b"m1" and r.headers["X-Pulsar-Message-ID"] == _id(ids[1])
    assert (
        http.get(f"{path}/examinemessage", params={"initialPosition": "latest", "messagePosition": 5}).content == b"m0"
    )
    assert http.get(f"{path}/examinemessage", params={"messagePosition": 6}).status_code == 404
    assert http.get(f"{path}/examinemessage", params={"messagePosition": 0}).status_code == 412
    assert http.get(f"{path}/examinemessage", params={"initialPosition": "middle"}).status_code == 412

    # nothing was published an hour ago: expiring by one hour leaves the backlog; by 0 s clears it
    assert http.post(f"{path}/subscription/sub/expireMessages/3600").status_code == 204
    assert http.get(f"{path}/stats").json()["subscriptions"]["sub"]["msgBacklog"] == 3
    time.sleep(0.01)  # published strictly before now, so that expiring by 0 s takes them
    assert http.post(f"{path}/subscription/sub/expireMessages/0").status_code == 204
    assert http.get(f"{path}/stats").json()["subscriptions"]["sub"]["msgBacklog"] == 0
    assert http.get(f"{path}/subscription/sub/position/1").status_code == 404
    assert http.post(f"{path}/subscription/nosub/expireMessages/0").status_code == 404
    consumer.close()


def test_batched_entry_is_answered_whole(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    producer = client.create_producer(
        name, batching_enabled=True, batching_max_messages=3, batching_max_publish_delay_ms=1000
    )
    for i in range(3):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    producer.close()
    r = http.get(
        f"/admin/v2/persistent/public/default/{name}/examinemessage",
        params={"initialPosition": "earliest", "messagePosition": 1},
    )
    assert r.status_code == 200 and r.headers["X-Pulsar-num-batch-message"] == "3"
    assert int(r.headers["X-Pulsar-batch-size"]) == len(r.content) and b"b2" in r.content


def test_cli_message_commands(broker: AdminBroker, client: pulsar.Client, name: str) -> None:
    import json

    from click.testing import CliRunner

    from magnetar.cli import main

    def run(*args: str, ok: bool = True) -> str:
        result = CliRunner().invoke(main, ["admin", "--admin-url", broker.http, *args])
        assert (result.exit_code == 0) == ok, result.output
        return result.output

    topic = f"persistent://public/default/{name}"
    client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest).close()
    ids = _produce(client, topic, 3)
    out = run("topics", "peek-messages", topic, "-s", "sub", "-n", "2")
    assert f"Message ID: {_id(ids[0])}" in out and f"Message ID: {_id(ids[1])}" in out and "m1" in out
    assert '"i": "0"' in out and "X-Pulsar-producer-name: p1" in out
    docs = json.loads(run("--json", "topics", "peek-messages", topic, "-s", "sub", "-n", "5"))
    assert [d["messageId"] for d in docs] == [_id(i) for i in ids]  # fewer than asked: all there are
    assert "m2" in run("topics", "examine-message", topic)
    assert "m0" in run("topics", "examine-message", topic, "-i", "earliest", "-m", "1")
    assert "m1" in run(
        "topics", "get-message-by-id", topic, "-l", str(ids[1].ledger_id()), "-e", str(ids[1].entry_id())
    )
    assert json.loads(run("--json", "topics", "last-message-id", topic))["entryId"] == ids[-1].entry_id()
    run("topics", "skip", topic, "-s", "sub", "-n", "1")
    assert "m1" in run("topics", "peek-messages", topic, "-s", "sub")
    run("topics", "expire-messages", topic, "-s", "sub", "-t", "3600")
    assert "m1" in run("topics", "peek-messages", topic, "-s", "sub")
    run("topics", "skip-all", topic, "-s", "sub")
    assert "404" in run("topics", "peek-messages", topic, "-s", "sub", ok=False)


def test_property_names_keep_their_case_and_odd_values_stay_headers(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    producer = client.create_producer(name, batching_enabled=False)
    mid = producer.send(b"odd", properties={"MyKey": "a\r\nInjected: yes", "k y": "é"})
    r = http.get(f"/admin/v2/persistent/public/default/{name}/ledger/{mid.ledger_id()}/entry/{mid.entry_id()}")
    assert r.status_code == 200 and r.content == b"odd"
    names = [k.decode() for k, _ in r.headers.raw]
    assert "X-Pulsar-PROPERTY-MyKey" in names and "Injected" not in names and "X-Pulsar-PROPERTY-k_y" in names
    assert r.headers["X-Pulsar-PROPERTY-MyKey"] == "a  Injected: yes"


def test_truncate_moves_subscriptions_to_the_end_and_deletes_closed_ledgers(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    from click.testing import CliRunner

    from magnetar.cli import main

    path = f"/admin/v2/persistent/public/default/{name}"
    consumer = client.subscribe(name, "sub", initial_position=pulsar.InitialPosition.Earliest)
    ids = _produce(client, name, 4)
    assert http.get(f"{path}/stats").json()["subscriptions"]["sub"]["msgBacklog"] == 4
    assert http.delete(f"{path}/truncate").status_code == 204
    stats = http.get(f"{path}/stats").json()
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 0
    internal = http.get(f"{path}/internalStats").json()
    assert [lg["ledgerId"] for lg in internal["ledgers"]] != [ids[0].ledger_id()]
    assert all(lg["ledgerId"] > ids[-1].ledger_id() for lg in internal["ledgers"])
    assert http.get(f"{path}/ledger/{ids[0].ledger_id()}/entry/0").status_code == 404
    # the topic goes on: new messages reach the subscription
    producer = client.create_producer(name, batching_enabled=False)
    producer.send(b"after")
    msg = consumer.receive(timeout_millis=5000)
    while msg.data() != b"after":  # messages dispatched before the truncate may still arrive
        msg = consumer.receive(timeout_millis=5000)
    consumer.close()
    assert http.delete(f"/admin/v2/persistent/public/default/{name}-missing/truncate").status_code == 404

    http.put(f"/admin/v2/persistent/public/default/{name}-p/partitions", json=2)
    _produce(client, f"{name}-p", 4)
    result = CliRunner().invoke(main, ["admin", "--admin-url", broker.http, "topics", "truncate", f"{name}-p"])
    assert result.exit_code == 0, result.output
    for i in range(2):
        internal = http.get(f"/admin/v2/persistent/public/default/{name}-p-partition-{i}/internalStats").json()
        assert sum(lg["entries"] for lg in internal["ledgers"]) == 0


def test_terminate_refuses_producers_and_ends_the_topic_for_consumers(
    broker: AdminBroker, client: pulsar.Client, http: httpx.Client, name: str
) -> None:
    path = f"/admin/v2/persistent/public/default/{name}"
    consumer = client.subscribe(name, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(name, batching_enabled=False)
    ids = [producer.send(f"t{i}".encode()) for i in range(3)]
    r = http.post(f"{path}/terminate")
    assert r.status_code == 200
    assert r.json() == {"ledgerId": ids[-1].ledger_id(), "entryId": ids[-1].entry_id(), "partitionIndex": -1}
    assert http.post(f"{path}/terminate").json()["entryId"] == ids[-1].entry_id()  # idempotent
    with pytest.raises(pulsar.TopicTerminated):
        producer.send(b"late")
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(name)
    got = [consumer.receive(timeout_millis=5000).data() for _ in range(3)]
    assert got == [b"t0", b"t1", b"t2"]  # what was stored stays readable
    consumer.close()
    assert http.get(f"{path}/lastMessageId").json()["entryId"] == ids[-1].entry_id()
    http.put(f"/admin/v2/persistent/public/default/{name}-p/partitions", json=2)
    assert http.post(f"/admin/v2/persistent/public/default/{name}-p/terminate").status_code == 405

    from click.testing import CliRunner

    from magnetar.cli import main

    mid = client.create_producer(f"{name}-cli").send(b"c")
    result = CliRunner().invoke(main, ["admin", "--admin-url", broker.http, "topics", "terminate", f"{name}-cli"])
    assert result.exit_code == 0, result.output
    assert f"successfully terminated at {mid.ledger_id()}:{mid.entry_id()}" in result.output
