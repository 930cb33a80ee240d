"""The source reads a topic whose older ledgers were offloaded to tiered storage and deleted from the
bookies, in both read modes (the broker reads them from the tier; readMode=bookies reads them from
the tier itself, where the managed ledger's metadata says they went)."""

from __future__ import annotations

import pytest

from tests.spark.spark_harness import SparkEnv, ledgers_of, produce, unique, values_of
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def test_offloaded_ledgers_read_in_both_modes(spark_env: SparkEnv) -> None:
    topic = unique("offloaded")
    tp = f"/admin/v2/persistent/public/default/{topic}"
    values = [f"o-{i:04d}".encode() for i in range(75)]
    produce(spark_env.service_url, topic, values)  # 20 entries a ledger: 4 ledgers
    tier = spark_env.tmp / unique("tier")
    tier.mkdir()
    # this topic only: the filesystem driver, bookie copies deleted as soon as the copy is verified
    spark_env.admin(
        "POST",
        f"{tp}/offloadPolicies",
        {
            "managedLedgerOffloadDriver": "filesystem",
            "fileSystemURI": f"file://{tier}",
            "managedLedgerOffloadDeletionLagInMillis": 0,
        },
    )
    spark_env.admin("PUT", f"{tp}/offload", {"ledgerId": 2**62, "entryId": 0, "partitionIndex": -1})
    wait_until(lambda: spark_env.admin("GET", f"{tp}/offload")["status"] != "RUNNING", "the offload", timeout_s=60)
    assert spark_env.admin("GET", f"{tp}/offload")["status"] == "SUCCESS"
    offloaded = [li["ledgerId"] for li in ledgers_of(spark_env, topic) if li["offloaded"]]
    assert len(offloaded) >= 3

    def bookie_copies_gone() -> bool:
        rows = spark_env.admin("GET", f"{tp}/explain-storage")["ledgers"]
        return all(r["tieredStorage"]["location"] == "tier" for r in rows if r["ledgerId"] in offloaded)

    wait_until(bookie_copies_gone, "the bookie copies to be deleted", timeout_s=60)
    for mode in ("broker", "bookies"):
        rows = spark_env.source(spark_env.spark.read, topic=topic, readMode=mode).load().collect()
        assert sorted(values_of(rows)) == values, mode
