"""What tests and benchmarks share: the one place for process harnesses and helpers.

Processes and servers:

* `zookeeper`: a real ZooKeeper per run, one chroot per test (the ``zookeeper`` / ``zk_url``
  fixtures).
* `bookies`: ``magnetar bookie`` processes (`RealBookie`, `RealCluster`); `brokers`: ``magnetar
  broker`` processes (`BrokerProcess`); `standalone`: ``magnetar standalone``
  (`start_standalone`); `bookie_load`: one bookie driven at full rate for the benchmarks.
* `broker_thread`: an in-process broker (MockBookKeeper, optionally its admin REST) in a thread.
* `s3server`: a real S3-compatible server (the Versity S3 Gateway, built with ``go install``) on a
  free port (the session-scoped ``s3_server`` fixture), for tiered storage.
* `chaos`: the chaos harness (deployments, workload, faults, invariants).

Clients and wire:

* `clients`: the official client (`pulsar_client`, `drain`, `produce`, `subscribe_pattern`);
  `receipts`: send receipts collected from the client's callback thread.
* `raw_pulsar`: a raw-socket Pulsar peer; `bookie_server`: a small bookie-protocol client, bookie
  configs, writing and reading back entries by port.
* `admin`: admin REST calls and namespaces (`rest`, `new_namespace`, `new_tenant_ns`).

Fakes and utilities:

* `waiting`: `wait_until` / `wait_until_async`, polling an observable event with a bound.
* `ports`: `free_port`; `clocks`: `FakeClock`; `certs`: test certificate authorities and keys.
* `fake_bookie`: in-process fake bookies for the BookKeeper client's operation tests;
  `fake_files`: file operations that fail or block on cue; `managed_ledger`: a managed-ledger
  config for tests; `tmpfs`: a small tmpfs for full-disk tests; `fuzz`: the decoder fuzzer's
  engine and targets.

A helper used by one test area only stays in that area (``tests/<area>/x.py``); no module imports
a test module (``test_*.py``); ``tests/test_suite_hygiene.py`` checks both.
"""
