"""Every admin endpoint over the real HTTP server, including its error statuses."""

from __future__ import annotations

import pulsar
import pytest

from tests.broker_admin.admin_harness import AdminBroker
from tests.support.admin import V2, new_tenant_ns


def test_clusters(http) -> None:
    assert http.get(f"{V2}/clusters").json() == ["standalone"]
    data = http.get(f"{V2}/clusters/standalone").json()
    assert data["brokerServiceUrl"].startswith("pulsar://") and data["serviceUrl"].startswith("http://")
    r = http.get(f"{V2}/clusters/nope")
    assert r.status_code == 404 and "nope" in r.json()["reason"]


def test_tenants_lifecycle_and_errors(http, name: str) -> None:
    assert "public" in http.get(f"{V2}/tenants").json()
    assert http.get(f"{V2}/tenants/{name}").status_code == 404
    tenant = {"adminRoles": ["r"], "allowedClusters": ["standalone"]}
    assert http.put(f"{V2}/tenants/{name}", json=tenant).status_code == 204
    assert http.put(f"{V2}/tenants/{name}").status_code == 409
    assert http.get(f"{V2}/tenants/{name}").json() == {"adminRoles": ["r"], "allowedClusters": ["standalone"]}
    assert http.post(f"{V2}/tenants/{name}", json={"adminRoles": []}).status_code == 204
    assert http.get(f"{V2}/tenants/{name}").json()["adminRoles"] == []
    r = http.put(f"{V2}/tenants/{name}x", json={"allowedClusters": ["elsewhere"]})
    assert r.status_code == 412 and "elsewhere" in r.json()["reason"]
    assert http.put(f"{V2}/tenants/bad%20name").status_code == 412
    assert http.put(f"{V2}/namespaces/{name}/ns").status_code == 204
    assert http.delete(f"{V2}/tenants/{name}").status_code == 409
    assert http.delete(f"{V2}/namespaces/{name}/ns").status_code == 204
    assert http.delete(f"{V2}/tenants/{name}").status_code == 204
    assert http.delete(f"{V2}/tenants/{name}").status_code == 404


def test_namespaces_and_policies(http, name: str) -> None:
    assert http.get(f"{V2}/namespaces/{name}").status_code == 404
    assert http.put(f"{V2}/namespaces/{name}/ns").status_code == 404  # no tenant
    ns = new_tenant_ns(http, name)
    assert http.put(f"{V2}/namespaces/{ns}").status_code == 409
    assert http.get(f"{V2}/namespaces/{name}").json() == [ns]
    assert http.get(f"{V2}/namespaces/{name}/other").status_code == 404
    base = f"{V2}/namespaces/{ns}"
    # retention
    assert http.get(f"{base}/retention").status_code == 204
    retention = {"retentionTimeInMinutes": 10, "retentionSizeInMB": -1}
    assert http.post(f"{base}/retention", json=retention).status_code == 204
    assert http.get(f"{base}/retention").json() == {"retentionTimeInMinutes": 10, "retentionSizeInMB": -1}
    r = http.post(f"{base}/retention", json={"retentionTimeInMinutes": 0, "retentionSizeInMB": 5})
    assert r.status_code == 400 and "retention" in r.json()["reason"]
    assert http.post(f"{base}/retention", content=b"{bad").status_code == 400
    # message TTL
    assert http.post(f"{base}/messageTTL", json=120).status_code == 204
    assert http.get(f"{base}/messageTTL").json() == 120
    assert http.post(f"{base}/messageTTL", json=-5).status_code == 400
    # backlog quota
    quota = {"limitSize": 1000, "limitTime": -1, "policy": "producer_exception"}
    assert http.post(f"{base}/backlogQuota", json=quota).status_code == 204
    age = {"limitSize": -1, "limitTime": 60, "policy": "consumer_backlog_eviction"}
    assert http.post(f"{base}/backlogQuota?backlogQuotaType=message_age", json=age).status_code == 204
    assert http.get(f"{base}/backlogQuotaMap").json() == {"destination_storage": quota, "message_age": age}
    assert http.post(f"{base}/backlogQuota", json={"policy": "nope"}).status_code == 400
    assert http.post(f"{base}/backlogQuota?backlogQuotaType=nope", json=quota).status_code == 400
    assert http.delete(f"{base}/backlogQuota?backlogQuotaType=message_age").status_code == 204
    assert list(http.get(f"{base}/backlogQuotaMap").json()) == ["destination_storage"]
    # deduplication and schema strategy
    assert http.post(f"{base}/deduplication", json=True).status_code == 204
    assert http.get(f"{base}/deduplication").json() is True
    assert http.post(f"{base}/deduplication", json="yes").status_code == 400
    assert http.put(f"{base}/schemaCompatibilityStrategy", json="BACKWARD").status_code == 204
    assert http.get(f"{base}/schemaCompatibilityStrategy").json() == "BACKWARD"
    assert http.put(f"{base}/schemaCompatibilityStrategy", json="SIDEWAYS").status_code == 400
    policies = http.get(base).json()
    assert policies["retention_policies"]["retentionTimeInMinutes"] == 10
    assert policies["message_ttl_in_seconds"] == 120 and policies["deduplicationEnabled"] is True
    for p in ("retention", "messageTTL", "deduplication", "schemaCompatibilityStrategy"):
        assert http.delete(f"{base}/{p}").status_code == 204
        assert http.get(f"{base}/{p}").status_code == 204
    assert http.get(f"{V2}/namespaces/{name}/nope/retention").status_code == 404


def test_topics_create_list_delete(http, client: pulsar.Client, name: str) -> None:
    ns = new_tenant_ns(http, name)
    tp = f"{V2}/persistent/{ns}"
    assert http.get(tp).json() == []
    assert http.put(f"{tp}/t1").status_code == 204
    assert http.put(f"{tp}/t1").status_code == 409
    assert http.put(f"{V2}/persistent/{name}/nope/t1").status_code == 404
    assert http.get(tp).json() == [f"persistent://{ns}/t1"]
    # partitioned
    assert http.put(f"{tp}/p/partitions", json=0).status_code == 406
    assert http.put(f"{tp}/p/partitions", json="x").status_code == 400
    assert http.put(f"{tp}/p/partitions", json=2).status_code == 204
    assert http.put(f"{tp}/p/partitions", json=2).status_code == 409
    assert http.put(f"{tp}/t1/partitions", json=2).status_code == 409  # exists as non-partitioned
    assert http.get(f"{tp}/p/partitions").json() == {"partitions": 2}
    assert http.get(f"{tp}/t1/partitions").json() == {"partitions": 0}
    assert http.post(f"{tp}/p/partitions", json=1).status_code == 422
    assert http.post(f"{tp}/p/partitions", json=3).status_code == 204
    assert http.post(f"{tp}/nope/partitions", json=3).status_code == 404
    assert http.get(f"{tp}/p/partitions").json() == {"partitions": 3}
    assert http.get(f"{tp}/partitioned").json() == [f"persistent://{ns}/p"]
    assert f"persistent://{ns}/p-partition-2" in http.get(tp).json()
    assert http.get(f"{tp}/p/stats").status_code == 404  # the partitions are the topics
    assert http.get(f"{tp}/p-partition-0/stats").status_code == 200
    assert http.get(f"{tp}/p/partitioned-stats").json()["metadata"] == {"partitions": 3, "deleted": False}
    # delete with an active producer needs force
    producer = client.create_producer(f"persistent://{ns}/t1")
    r = http.delete(f"{tp}/t1")
    assert r.status_code == 412 and "active" in r.json()["reason"]
    assert http.delete(f"{tp}/t1?force=true").status_code == 204
    producer.close()
    assert http.delete(f"{tp}/t1").status_code in (204, 404)  # the producer's reconnect may recreate it
    assert http.delete(f"{tp}/p").status_code == 409
    assert http.delete(f"{tp}/p/partitions").status_code == 204
    assert http.get(f"{tp}/p/partitions").json() == {"partitions": 0}
    assert http.delete(f"{tp}/p/partitions").status_code == 404
    assert http.delete(f"{tp}/nope").status_code == 404
    assert http.get(f"{tp}/nope/stats").status_code == 404
    assert http.get(f"{tp}/nope/internalStats").status_code == 404


def test_stats_subscriptions_and_cursor_ops(http, client: pulsar.Client, name: str) -> None:
    ns = new_tenant_ns(http, name)
    topic = f"persistent://{ns}/s"
    tp = f"{V2}/persistent/{ns}/s"
    consumer = client.subscribe(topic, "live", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(f"m{i}".encode())
    for _ in range(10):
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
    assert http.put(f"{tp}/subscription/admin-sub", json={"ledgerId": -1, "entryId": -1}).status_code == 204
    assert http.put(f"{tp}/subscription/admin-sub").status_code == 409
    assert http.put(f"{tp}/subscription/late").status_code == 204  # latest by default
    # a missing topic is auto-created, as by a client's lookup (Pulsar's createSubscription)
    assert http.put(f"{V2}/persistent/{ns}/made-by-sub/subscription/x").status_code == 204
    assert http.get(f"{V2}/persistent/{ns}/made-by-sub/subscriptions").json() == ["x"]
    assert http.put(f"{tp}/subscription/bad", json={"ledgerId": "x"}).status_code == 400
    assert http.get(f"{tp}/subscriptions").json() == ["admin-sub", "late", "live"]
    stats = http.get(f"{tp}/stats").json()
    assert stats["msgInCounter"] == 10 and stats["msgOutCounter"] == 10
    assert stats["publishers"][0]["producerName"] == producer.producer_name()
    subs = stats["subscriptions"]
    assert subs["admin-sub"]["msgBacklog"] == 10 and subs["late"]["msgBacklog"] == 0
    assert subs["live"]["consumers"][0]["msgOutCounter"] == 10 and subs["live"]["type"] == "Exclusive"
    internal = http.get(f"{tp}/internalStats").json()
    assert internal["entriesAddedCounter"] == 10 and set(internal["cursors"]) >= {"admin-sub", "late", "live"}
    sub = f"{tp}/subscription/admin-sub"
    assert http.post(f"{sub}/skip/3").status_code == 204
    assert http.get(f"{tp}/stats").json()["subscriptions"]["admin-sub"]["msgBacklog"] == 7
    assert http.post(f"{sub}/skip/x").status_code == 400
    assert http.post(f"{sub}/skip_all").status_code == 204
    assert http.get(f"{tp}/stats").json()["subscriptions"]["admin-sub"]["msgBacklog"] == 0
    assert http.post(f"{sub}/resetcursor/0").status_code == 204  # by publish time: back to the start
    assert http.get(f"{tp}/stats").json()["subscriptions"]["admin-sub"]["msgBacklog"] == 10
    first = internal["ledgers"][0]["ledgerId"]
    assert http.post(f"{sub}/resetcursor", json={"ledgerId": first, "entryId": 5}).status_code == 204
    assert http.get(f"{tp}/stats").json()["subscriptions"]["admin-sub"]["msgBacklog"] == 5
    reset = {"ledgerId": first, "entryId": 5, "isExcluded": True}
    assert http.post(f"{sub}/resetcursor", json=reset).status_code == 204
    assert http.get(f"{tp}/stats").json()["subscriptions"]["admin-sub"]["msgBacklog"] == 4
    assert http.post(f"{tp}/subscription/nope/skip_all").status_code == 404
    r = http.delete(f"{tp}/subscription/live")
    assert r.status_code == 412 and "consumers" in r.json()["reason"]
    assert http.delete(f"{tp}/subscription/admin-sub").status_code == 204
    assert http.delete(f"{tp}/subscription/admin-sub").status_code == 404
    assert http.delete(f"{tp}/subscription/live?force=true").status_code == 204
    assert "live" not in http.get(f"{tp}/subscriptions").json()
    assert http.put(f"{tp}/unload").status_code == 204
    assert http.put(f"{V2}/persistent/{ns}/nope/unload").status_code == 404
    # the producer reconnects after the unload and goes on
    producer.send(b"after-unload")
    producer.close()
    consumer.close()


def test_partitioned_topic_created_with_its_metadata_object(http, name: str) -> None:
    # pulsar-admin and the Go admin client send Pulsar's PartitionedTopicMetadata under its own
    # media type: {"partitions": N, "properties": {...} or null}
    ns = new_tenant_ns(http, name)
    tp = f"{V2}/persistent/{ns}"
    meta = {"Content-Type": "application/vnd.partitioned-topic-metadata+json"}
    assert (
        http.put(f"{tp}/plain/partitions", json={"properties": None, "partitions": 2}, headers=meta).status_code == 204
    )
    assert http.get(f"{tp}/plain/partitions").json() == {"partitions": 2}
    assert (
        http.put(
            f"{tp}/tagged/partitions", json={"partitions": 3, "properties": {"owner": "team-a"}}, headers=meta
        ).status_code
        == 204
    )
    assert http.get(f"{tp}/tagged/partitions").json() == {"partitions": 3, "properties": {"owner": "team-a"}}
    assert http.post(f"{tp}/tagged/partitions", json=4).status_code == 204  # the properties stay
    assert http.get(f"{tp}/tagged/partitions").json() == {"partitions": 4, "properties": {"owner": "team-a"}}
    assert http.put(f"{V2}/non-persistent/{ns}/np/partitions", json={"partitions": 2}, headers=meta).status_code == 204
    assert http.get(f"{V2}/non-persistent/{ns}/np/partitions").json()["partitions"] == 2
    assert http.put(f"{tp}/bad/partitions", json={"partitions": 0}, headers=meta).status_code == 406
    assert (
        http.put(f"{tp}/bad/partitions", json={"partitions": 2, "properties": {"n": 1}}, headers=meta).status_code
        == 400
    )
    assert http.put(f"{tp}/bad/partitions", json=[2], headers=meta).status_code == 400
    assert http.put(f"{tp}/bad/partitions", json={"partitions": 2}).status_code == 400  # plain JSON: a number


def test_namespace_topics_by_mode(http, name: str) -> None:
    # the Go and Java clients' HTTP lookup lists a namespace's topics here (pattern subscriptions)
    ns = new_tenant_ns(http, name)
    assert http.put(f"{V2}/persistent/{ns}/a").status_code == 204
    assert http.put(f"{V2}/persistent/{ns}/p/partitions", json=2).status_code == 204
    assert http.put(f"{V2}/non-persistent/{ns}/np/partitions", json=1).status_code == 204
    persistent = [f"persistent://{ns}/a", f"persistent://{ns}/p-partition-0", f"persistent://{ns}/p-partition-1"]
    non_persistent = [f"non-persistent://{ns}/np-partition-0"]
    assert http.get(f"{V2}/namespaces/{ns}/topics").json() == persistent
    assert http.get(f"{V2}/namespaces/{ns}/topics?mode=PERSISTENT").json() == persistent
    assert http.get(f"{V2}/namespaces/{ns}/topics?mode=NON_PERSISTENT").json() == non_persistent
    assert sorted(http.get(f"{V2}/namespaces/{ns}/topics?mode=ALL").json()) == sorted(persistent + non_persistent)
    assert http.get(f"{V2}/namespaces/{ns}/topics?mode=SOME").status_code == 400
    assert http.get(f"{V2}/namespaces/{name}/missing/topics").status_code == 404


def test_topic_level_policies(http, name: str) -> None:
    ns = new_tenant_ns(http, name)
    tp = f"{V2}/persistent/{ns}/pol"
    assert http.get(f"{tp}/retention").status_code == 404
    assert http.put(tp).status_code == 204
    retention = {"retentionTimeInMinutes": 5, "retentionSizeInMB": 5}
    assert http.post(f"{V2}/namespaces/{ns}/retention", json=retention).status_code == 204
    assert http.get(f"{tp}/retention").status_code == 204
    assert http.get(f"{tp}/retention?applied=true").json() == {"retentionTimeInMinutes": 5, "retentionSizeInMB": 5}
    assert http.post(f"{tp}/retention", json={"retentionTimeInMinutes": -1, "retentionSizeInMB": 1}).status_code == 204
    assert http.get(f"{tp}/retention").json() == {"retentionTimeInMinutes": -1, "retentionSizeInMB": 1}
    assert http.post(f"{tp}/messageTTL?messageTTL=30").status_code == 204
    assert http.get(f"{tp}/messageTTL").json() == 30
    assert http.post(f"{tp}/messageTTL?messageTTL=abc").status_code == 400
    quota = {"limitSize": 10, "limitTime": -1, "policy": "producer_request_hold"}
    assert http.post(f"{tp}/backlogQuota", json=quota).status_code == 204
    assert http.get(f"{tp}/backlogQuotaMap").json() == {"destination_storage": quota}
    explain = http.get(f"{tp}/explain-storage").json()
    assert explain["policies"]["sources"]["retention"] == "topic"
    assert explain["policies"]["messageTTLInSeconds"] == 30
    for p in ("retention", "messageTTL", "backlogQuota"):
        assert http.delete(f"{tp}/{p}").status_code == 204
    assert http.get(f"{tp}/retention").status_code == 204
    assert http.get(f"{tp}/backlogQuotaMap").json() == {}


def test_lookup_and_unknown_paths(broker: AdminBroker, http, name: str) -> None:
    ns = new_tenant_ns(http, name)
    data = http.get(f"/lookup/v2/topic/persistent/{ns}/x").json()
    assert data["brokerUrl"] == broker.url and data["httpUrl"] == broker.http
    assert http.get(f"/lookup/v2/topic/persistent/{name}/nope/x").status_code == 404
    r = http.get("/admin/v2/nothing/here")
    assert r.status_code == 404 and "reason" in r.json()
    assert http.patch(f"{V2}/tenants").status_code == 405


@pytest.mark.parametrize("force", [False, True])
def test_delete_namespace_with_topics(http, name: str, force: bool) -> None:
    ns = new_tenant_ns(http, f"{name}f{int(force)}")
    assert http.put(f"{V2}/persistent/{ns}/a").status_code == 204
    assert http.put(f"{V2}/persistent/{ns}/b/partitions", json=2).status_code == 204
    r = http.delete(f"{V2}/namespaces/{ns}" + ("?force=true" if force else ""))
    if force:
        assert r.status_code == 204
        assert http.get(f"{V2}/namespaces/{ns}").status_code == 404
    else:
        assert r.status_code == 409 and "non empty" in r.json()["reason"]
