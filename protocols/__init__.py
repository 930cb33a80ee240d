"""Magnetar's wire formats, shared by clients and servers: leaves that import only protobuf, crc32c
and the standard library (as BookKeeper's ``bookkeeper-proto`` module).

* `protocols.pulsar`: the Apache Pulsar binary protocol (frames, commands, batches, topic names).
* `protocols.bookkeeper`: the bookie protocol, entry digests, ledger metadata, cookies and the
  metadata-store layout.
* `protocols.managed_ledger`: the managed-ledger and cursor records kept in the metadata store.

Importing one of them loads no other (this package itself imports nothing).
"""
