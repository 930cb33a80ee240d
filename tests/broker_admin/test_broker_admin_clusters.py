"""Clusters and failure domains over the admin REST: Pulsar's ClusterData JSON, codes and rules."""

from __future__ import annotations

import httpx

from tests.broker_admin.admin_harness import AdminBroker

V2 = "/admin/v2"
DATA = {
    "serviceUrl": "http://east:8080",
    "serviceUrlTls": "https://east:8443",
    "brokerServiceUrl": "pulsar://east:6650",
    "brokerServiceUrlTls": "pulsar+ssl://east:6651",
}


def test_cluster_crud(broker: AdminBroker, http: httpx.Client) -> None:
    assert http.get(f"{V2}/clusters").json() == ["standalone"]
    own = http.get(f"{V2}/clusters/standalone").json()
    assert own["brokerServiceUrl"] == broker.url and own["serviceUrl"].startswith("http://")

    assert http.put(f"{V2}/clusters/east", json=DATA).status_code == 204
    assert http.put(f"{V2}/clusters/east", json=DATA).status_code == 409
    assert http.get(f"{V2}/clusters").json() == ["east", "standalone"]
    assert http.get(f"{V2}/clusters/east").json() == DATA
    changed = {**DATA, "serviceUrl": "http://east2:8080", "peerClusterNames": ["standalone"], "unknownKey": 1}
    assert http.post(f"{V2}/clusters/east", json=changed).status_code == 204
    got = http.get(f"{V2}/clusters/east").json()
    assert got["serviceUrl"] == "http://east2:8080" and got["peerClusterNames"] == ["standalone"]
    assert "unknownKey" not in got
    assert http.post(f"{V2}/clusters/west", json=DATA).status_code == 404
    assert http.get(f"{V2}/clusters/west").status_code == 404

    bad = http.put(f"{V2}/clusters/west", json={"brokerServiceUrl": "http://west:6650"})
    assert bad.status_code == 400 and "brokerServiceUrl" in bad.json()["reason"]
    assert http.put(f"{V2}/clusters/west", json=[1]).status_code == 400
    assert http.put(f"{V2}/clusters/bad%20name", json=DATA).status_code == 412

    # a tenant may now allow the new cluster; while it does, the cluster cannot be deleted
    assert http.put(f"{V2}/tenants/multi", json={"allowedClusters": ["standalone", "east"]}).status_code == 204
    assert http.put(f"{V2}/tenants/nowhere", json={"allowedClusters": ["west"]}).status_code == 412
    r = http.delete(f"{V2}/clusters/east")
    assert r.status_code == 412 and "multi" in r.json()["reason"]
    assert http.delete(f"{V2}/tenants/multi").status_code == 204
    assert http.delete(f"{V2}/clusters/east").status_code == 204
    assert http.delete(f"{V2}/clusters/east").status_code == 404
    assert http.delete(f"{V2}/clusters/standalone").status_code == 412
    assert http.put(f"{V2}/clusters/standalone", json=DATA).status_code == 409
    # this broker's own cluster can be updated: the stored data is served from then on
    assert http.post(f"{V2}/clusters/standalone", json=DATA).status_code == 204
    assert http.get(f"{V2}/clusters/standalone").json() == DATA


def test_failure_domains(broker: AdminBroker, http: httpx.Client) -> None:
    base = f"{V2}/clusters/standalone/failureDomains"
    assert http.get(base).json() == {}
    assert http.post(f"{base}/rack1", json={"brokers": ["b1:8080", "b2:8080"]}).status_code == 204
    assert http.post(f"{base}/rack2", json={"brokers": ["b3:8080"]}).status_code == 204
    assert http.get(f"{base}/rack1").json() == {"brokers": ["b1:8080", "b2:8080"]}
    assert http.get(base).json() == {"rack1": {"brokers": ["b1:8080", "b2:8080"]}, "rack2": {"brokers": ["b3:8080"]}}
    conflict = http.post(f"{base}/rack2", json={"brokers": ["b2:8080", "b3:8080"]})
    assert conflict.status_code == 409 and "rack1" in conflict.json()["reason"]
    assert http.post(f"{base}/rack1", json={"brokers": ["b1:8080"]}).status_code == 204  # update
    assert http.post(f"{base}/rack2", json={"brokers": ["b2:8080", "b3:8080"]}).status_code == 204
    assert http.post(f"{base}/rack3", json={"brokers": "b4"}).status_code == 400
    assert http.delete(f"{base}/rack1").status_code == 204
    assert http.delete(f"{base}/rack1").status_code == 404
    assert http.get(f"{base}/rack1").status_code == 404
    assert http.get(f"{V2}/clusters/nope/failureDomains").status_code == 404
