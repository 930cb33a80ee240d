"""Schema admin endpoints (``/admin/v2/schemas/...``, Pulsar's SchemasResource paths and JSON),
checked together with schemas the official client registers."""

from __future__ import annotations

import functools
import json

import pulsar
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String

from protocols.pulsar import TopicName
from tests.support.admin import V2, new_tenant_ns

AVRO_V0 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
AVRO_V1 = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": 0}],
}
AVRO_BAD = {"type": "record", "name": "User", "fields": [{"name": "id", "type": "long"}]}


class Point(Record):
    x = Integer()
    label = String()


def _payload(schema: dict, kind: str = "AVRO", **props: str) -> dict:
    return {"type": kind, "schema": json.dumps(schema), "properties": props}


def test_upload_get_versions_delete(http, name: str) -> None:
    ns = new_tenant_ns(http, name)
    base = f"{V2}/schemas/{ns}/users"
    assert http.get(f"{base}/schema").status_code == 404
    assert http.get(f"{base}/schemas").json() == {"getSchemaResponses": []}

    r = http.post(f"{base}/schema", json=_payload(AVRO_V0, owner="team-a"))
    assert r.status_code == 202 and r.json() == {"version": {"version": 0}}
    assert http.post(f"{base}/schema", json=_payload(AVRO_V0)).json() == {"version": {"version": 0}}  # same
    assert http.post(f"{base}/schema", json=_payload(AVRO_V1)).json() == {"version": {"version": 1}}

    latest = http.get(f"{base}/schema").json()
    assert latest["version"] == 1 and latest["type"] == "AVRO"
    assert json.loads(latest["data"]) == AVRO_V1 and latest["timestamp"] > 0
    first = http.get(f"{base}/schema/0").json()
    assert first["properties"] == {"owner": "team-a"} and json.loads(first["data"]) == AVRO_V0
    assert http.get(f"{base}/schema/7").status_code == 404
    assert http.get(f"{base}/schema/x").status_code == 400
    assert [v["version"] for v in http.get(f"{base}/schemas").json()["getSchemaResponses"]] == [0, 1]

    assert http.post(f"{base}/version", json=_payload(AVRO_V0)).json() == {"version": 0}
    assert http.post(f"{base}/version", json=_payload(AVRO_BAD)).status_code == 404

    deleted = http.delete(f"{base}/schema")
    assert deleted.status_code == 200 and deleted.json() == {"version": 2}
    assert http.get(f"{base}/schema").status_code == 404
    assert http.delete(f"{base}/schema").json() == {"version": -1}


def test_compatibility_and_errors(http, name: str) -> None:
    ns = new_tenant_ns(http, name)
    base = f"{V2}/schemas/{ns}/strict"
    assert http.put(f"{V2}/namespaces/{ns}/schemaCompatibilityStrategy", json="BACKWARD").status_code == 204
    assert http.post(f"{base}/schema", json=_payload(AVRO_V0)).status_code == 202
    check = http.post(f"{base}/compatibility", json=_payload(AVRO_BAD)).json()
    # the property names Pulsar's REST writes (and the Java admin client reads)
    assert check == {"compatibility": False, "schemaCompatibilityStrategy": "BACKWARD"}
    assert http.post(f"{base}/compatibility", json=_payload(AVRO_V1)).json()["compatibility"] is True
    refused = http.post(f"{base}/schema", json=_payload(AVRO_BAD))
    assert refused.status_code == 409 and "incompatible" in refused.json()["reason"]
    assert http.post(f"{base}/schema", json={"type": "AVRO", "schema": "{not json"}).status_code == 422
    assert http.post(f"{base}/schema", json={"type": "NOPE", "schema": ""}).status_code == 400
    assert http.post(f"{base}/schema", json=[1]).status_code == 400
    assert http.get(f"{V2}/schemas/{name}/missing/t/schema").status_code == 404  # no such namespace


def test_client_schemas_are_visible_and_round_trip(http, client: pulsar.Client, name: str) -> None:
    ns = new_tenant_ns(http, name)
    for kind, schema, topic in (("JSON", JsonSchema(Point), "points"), ("AVRO", AvroSchema(Point), "avro")):
        producer = client.create_producer(f"persistent://{ns}/{topic}", schema=schema)
        producer.send(Point(x=1, label="a"))
        producer.close()
        got = http.get(f"{V2}/schemas/{ns}/{topic}/schema").json()
        assert got["type"] == kind and got["version"] == 0
        assert {f["name"] for f in json.loads(got["data"])["fields"]} == {"x", "label"}
        # the text the admin API gives back is the same schema: uploading it is version 0 again
        again = http.post(f"{V2}/schemas/{ns}/{topic}/schema", json={"type": kind, "schema": got["data"]})
        assert again.json() == {"version": {"version": 0}}
    # a consumer with the schema uploaded by the admin API reads what a producer wrote
    consumer = client.subscribe(
        f"persistent://{ns}/avro", "s", schema=AvroSchema(Point), initial_position=pulsar.InitialPosition.Earliest
    )
    assert consumer.receive(5000).value().x == 1
    consumer.close()


def test_partition_names_share_the_partitioned_topics_schema(http, name: str) -> None:
    ns = new_tenant_ns(http, name)
    assert http.put(f"{V2}/persistent/{ns}/pt/partitions", json=2).status_code == 204
    assert http.post(f"{V2}/schemas/{ns}/pt/schema", json=_payload(AVRO_V0)).status_code == 202
    assert http.get(f"{V2}/schemas/{ns}/pt-partition-1/schema").json()["version"] == 0


def test_key_value_schema_in_pulsars_rest_form(http, broker, name: str) -> None:
    """A KEY_VALUE schema goes over REST as ``{"key": ..., "value": ...}`` (a primitive side ``""``)
    and is stored in the binary form clients register, so its sides are validated and compared."""
    ns = new_tenant_ns(http, name)
    base = f"{V2}/schemas/{ns}/kv"
    props = {"key.schema.type": "STRING", "value.schema.type": "AVRO", "kv.encoding.type": "SEPARATED"}
    body = {"type": "KEY_VALUE", "schema": json.dumps({"key": "", "value": AVRO_V0}), "properties": props}
    assert http.post(f"{base}/schema", json=body).status_code == 202
    got = http.get(f"{base}/schema").json()
    assert got["type"] == "KEY_VALUE" and got["properties"] == props
    assert json.loads(got["data"]) == {"key": "", "value": AVRO_V0}
    stored = json.dumps(AVRO_V0, separators=(",", ":")).encode()
    info, _version = broker.call(
        functools.partial(broker.service.schemas.get, TopicName.parse(f"persistent://{ns}/kv"))
    )
    assert info.data == b"\0\0\0\0" + len(stored).to_bytes(4, "big") + stored
    bad = {**body, "schema": json.dumps({"key": "", "value": {"type": "record", "name": "X", "fields": 3}})}
    assert http.post(f"{base}/schema", json=bad).status_code == 422
