"""Standalone's broker reaches its own bookie in process (``[standalone] in_process_transport``,
on by default) or over loopback TCP (off), with the same behaviour as a user sees it through the
official client: messages produced are consumed once each, in order, and a bookie-side error
(the topic's current ledger fenced on the bookie, as a new owner's recovery would) surfaces to
the managed ledger, which rolls to a new ledger, so no send fails and nothing is lost.

Which transport ran is read from the broker's ``/metrics``: the BookKeeper client's
``bookkeeper_client_CHANNEL_CONNECT_total`` counts TCP connections to bookies.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pulsar
import pytest

from bk_client import master_key
from protocols.bookkeeper import StatusCode, read_request
from tests.support.bookie_server import SyncClient
from tests.support.standalone import start_standalone

pytestmark = pytest.mark.slow

TOPIC = "persistent://public/default/inprocess-fence"


def _internal_stats(admin_url: str) -> dict:  # type: ignore[type-arg]
    r = httpx.get(f"{admin_url}/admin/v2/persistent/public/default/inprocess-fence/internalStats", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def _bookie_connects(admin_url: str) -> float:
    text = httpx.get(f"{admin_url}/metrics", timeout=10).text
    match = re.search(r"^bookkeeper_client_CHANNEL_CONNECT_total (\S+)$", text, re.M)
    assert match, "the BookKeeper client's metrics are on the broker's /metrics"
    return float(match.group(1))


def _fence_on_the_bookie(bookie_port: int, ledger_id: int) -> None:
    """What a new owner's recovery does first: a fencing read with the ledger's master key
    (standalone's managed-ledger password is empty)."""
    client = SyncClient(bookie_port)
    try:
        client.send(read_request(1, ledger_id, 0, fence=True, master_key=master_key(b"")))
        response = client.next_response()
        assert response is not None and response.readResponse.status == StatusCode.EOK
    finally:
        client.close()


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "network"])
def test_produce_consume_and_a_fenced_ledger_over_each_transport(tmp_path: Path, in_process: bool) -> None:
    data = tmp_path / "data"
    sa = start_standalone(data, "--set", f"standalone.in_process_transport={str(in_process).lower()}")
    try:
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=15)
        consumer = client.subscribe(TOPIC, "all")
        producer = client.create_producer(TOPIC, batching_enabled=False, send_timeout_millis=15_000)
        for i in range(20):
            producer.send(b"before-%d" % i)
        ledgers = _internal_stats(sa.admin_url)["ledgers"]
        fenced = ledgers[-1]["ledgerId"]

        _fence_on_the_bookie(int((data / "test-bookie-port").read_text()), fenced)

        for i in range(20):  # the first add meets EFENCED: the managed ledger rolls and re-issues it
            producer.send(b"after-%d" % i)
        after = _internal_stats(sa.admin_url)["ledgers"]
        ids = [li["ledgerId"] for li in after]
        assert fenced in ids and ids[-1] != fenced
        assert next(li for li in after if li["ledgerId"] == fenced)["entries"] == 20

        got = []
        for _ in range(40):
            msg = consumer.receive(timeout_millis=10_000)
            got.append(msg.data())
            consumer.acknowledge(msg)
        assert got == [b"before-%d" % i for i in range(20)] + [b"after-%d" % i for i in range(20)]
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=500)

        connects = _bookie_connects(sa.admin_url)
        assert connects == 0 if in_process else connects >= 1
        client.close()
    finally:
        assert sa.stop() == 0, sa.log()
