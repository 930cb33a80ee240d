"""The Spark source's managedLedgerPassword option reaches the executors' bookie reads."""

from __future__ import annotations

from sinks.spark._options import SourceOptions


def test_managed_ledger_password_option() -> None:
    base = {
        "service.url": "pulsar://h:6650",
        "admin.url": "http://h:8080",
        "topic": "t",
        "readMode": "bookies",
        "metadata.url": "zk://h:2181",
    }
    assert SourceOptions.parse(base).read_config().ledger_password == ""
    opts = SourceOptions.parse({**base, "managedLedgerPassword": "s3cret"})
    assert opts.read_config().ledger_password == "s3cret"
