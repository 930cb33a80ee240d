"""Tiered storage: offload throughput, and catch-up reads from the tier against from the bookies.

For each driver asked for (``filesystem``, ``s3``), one ``magnetar standalone`` subprocess on free
loopback ports (1 bookie), with small ledgers (rolled every ``--ledger-mb`` MB, no minimum age),
the deletion lag 0 and infinite retention on ``public/default``:

1. the official client produces ``--mb`` MB of ``--size`` B messages (batched unless
   ``--no-batching``), then the topic is unloaded, so every ledger written is closed and the
   broker's entry cache is empty;
2. **catch-up from the bookies**: a reader of the official client (in this process) reads the
   whole topic from the earliest position, timed from its creation to the last message;
3. **offload**: ``PUT .../offload`` up to the end of the topic, timed until ``GET .../offload``
   says SUCCESS (polled every 20 ms); MB/s counts the ``size`` of the ledgers ``internalStats``
   then marks ``offloaded``;
4. the bookie copies are deleted (deletion lag 0; waited for in ``explain-storage`` until every
   offloaded ledger lives in the tier only), the topic is unloaded again;
5. **catch-up from the tier**: the same reader read, every ledger now read back from the tier.

The S3 driver runs against the S3-compatible server the tests use (the Versity S3 Gateway over a
temporary directory, built by ``tests/resources/s3server/install.sh``); when it cannot be built
the S3 rows say why and the rest still runs. Every store is on the local disk and was just
written, so reads come mostly from the page cache: the figures are the software path (broker,
bookie, tier layout, S3 HTTP), not a disk. Asserts only that each read got every message; prints
a table.

Usage::

    PYTHONPATH=. .venv/bin/python bench/offload_bench.py [--mb 256] [--size 1024] [--ledger-mb 4]
        [--drivers filesystem,s3] [--no-batching]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.s3server import ACCESS_KEY, SECRET_KEY, S3Server, build_s3_server
from tests.support.standalone import Standalone, start_standalone

MB = 1_000_000
BUCKET = "offload-bench"
TOPIC = "offload-bench"
TP = f"/admin/v2/persistent/public/default/{TOPIC}"
DRIVERS = ("filesystem", "s3")
POLL_S = 0.02


@dataclass
class Read:
    """One catch-up read of the whole topic."""

    messages: int
    payload_bytes: int
    seconds: float

    @property
    def mb_s(self) -> float:
        """Payload MB (10^6 B) per second."""
        return self.payload_bytes / MB / self.seconds

    @property
    def msg_s(self) -> float:
        """Messages per second."""
        return self.messages / self.seconds


@dataclass
class Offload:
    """One manual offload, timed until its status was SUCCESS."""

    ledgers: int
    bytes: int
    seconds: float

    @property
    def mb_s(self) -> float:
        """Ledger MB (10^6 B, as ``internalStats`` sizes them) per second."""
        return self.bytes / MB / self.seconds


@dataclass
class DriverRun:
    """What one driver's run measured (``skipped`` says why it did not run)."""

    driver: str
    produce_s: float = 0.0
    bookies: Read | None = None
    offload: Offload | None = None
    tier: Read | None = None
    skipped: str = ""


def broker_args(driver: str, offload_dir: Path, s3: S3Server | None, ledger_mb: int) -> list[str]:
    """``--set`` options for standalone: small ledgers rolled at once, the driver, deletion lag 0."""
    args = [
        "managed_ledger.managedLedgerMinLedgerRolloverTimeMinutes=0",
        f"managed_ledger.managedLedgerMaxSizePerLedgerMbytes={ledger_mb}",
        "offload.managedLedgerOffloadDeletionLagMs=0",
    ]
    if driver == "filesystem":
        args += ["offload.managedLedgerOffloadDriver=filesystem", f"offload.fileSystemURI=file://{offload_dir}"]
    elif driver == "s3":
        assert s3 is not None
        args += [
            "offload.managedLedgerOffloadDriver=S3",
            f"offload.s3ManagedLedgerOffloadBucket={BUCKET}",
            f"offload.s3ManagedLedgerOffloadServiceEndpoint={s3.endpoint}",
            f"offload.s3ManagedLedgerOffloadCredentialId={ACCESS_KEY}",
            f"offload.s3ManagedLedgerOffloadCredentialSecret={SECRET_KEY}",
        ]
    else:
        raise ValueError(f"unknown driver {driver!r} (one of {', '.join(DRIVERS)})")
    return [part for a in args for part in ("--set", a)]


def _rest(sa: Standalone, method: str, path: str, **kwargs: Any) -> Any:
    r = httpx.request(method, sa.admin_url + path, timeout=60, **kwargs)
    r.raise_for_status()
    return r.json() if r.content else None


def _wait(what: str, check: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(POLL_S)
    raise SystemExit(f"timed out waiting for {what}")


def produce(client: pulsar.Client, count: int, size: int, batching: bool) -> float:
    """Send ``count`` messages of ``size`` B; the seconds until the last was receipted."""
    producer = client.create_producer(
        f"persistent://public/default/{TOPIC}",
        batching_enabled=batching,
        block_if_queue_full=True,
        max_pending_messages=5000,
        send_timeout_millis=60_000,
    )
    body = bytes(size)
    started = time.monotonic()
    for _ in range(count):
        producer.send_async(body, None)
    producer.flush()
    elapsed = time.monotonic() - started
    producer.close()
    return elapsed


def read_all(client: pulsar.Client, expected: int) -> Read:
    """Read the topic from the earliest position with a reader until ``expected`` messages arrived."""
    started = time.monotonic()
    reader = client.create_reader(
        f"persistent://public/default/{TOPIC}", pulsar.MessageId.earliest, receiver_queue_size=5000
    )
    n = nbytes = 0
    try:
        while n < expected:
            msg = reader.read_next(timeout_millis=60_000)
            n += 1
            nbytes += len(msg.data())
        elapsed = time.monotonic() - started
    finally:
        reader.close()
    return Read(n, nbytes, elapsed)


def offload_all(sa: Standalone) -> Offload:
    """Offload every closed ledger; timed from the PUT until the status is SUCCESS."""
    started = time.monotonic()
    _rest(sa, "PUT", f"{TP}/offload", json={"ledgerId": 2**62, "entryId": 0, "partitionIndex": -1})
    status = _wait(
        "the offload", lambda: (s := _rest(sa, "GET", f"{TP}/offload"))["status"] != "RUNNING" and s, timeout_s=600
    )
    elapsed = time.monotonic() - started
    if status["status"] != "SUCCESS":
        raise SystemExit(f"the offload failed: {status}")
    done = [li for li in _rest(sa, "GET", f"{TP}/internalStats")["ledgers"] if li["offloaded"]]
    return Offload(len(done), sum(li["size"] for li in done), elapsed)


def wait_bookie_copies_deleted(sa: Standalone) -> None:
    """Until every offloaded ledger lives in the tier only (its bookie copy deleted)."""

    def all_in_tier() -> bool:
        states = [r["tieredStorage"]["state"] for r in _rest(sa, "GET", f"{TP}/explain-storage")["ledgers"]]
        return "BOOKIE_DELETED" in states and "COMPLETE" not in states and "STARTED" not in states

    _wait("the bookie copies to be deleted", all_in_tier, timeout_s=120)


def run_driver(driver: str, base: Path, args: argparse.Namespace, s3: S3Server | None) -> DriverRun:
    """One standalone, produce, read from the bookies, offload, read from the tier."""
    run = DriverRun(driver)
    count = max(1, args.mb * MB // args.size)
    (base / "tier").mkdir(exist_ok=True)  # the filesystem driver writes into an existing directory
    sa = start_standalone(base / f"data-{driver}", *broker_args(driver, base / "tier", s3, args.ledger_mb))
    try:
        _rest(
            sa,
            "POST",
            "/admin/v2/namespaces/public/default/retention",
            json={"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
        )
        client = pulsar.Client(sa.service_url, operation_timeout_seconds=60, logger=_quiet_logger())
        try:
            run.produce_s = produce(client, count, args.size, not args.no_batching)
            _rest(sa, "PUT", f"{TP}/unload")
            run.bookies = read_all(client, count)
            run.offload = offload_all(sa)
            wait_bookie_copies_deleted(sa)
            _rest(sa, "PUT", f"{TP}/unload")
            run.tier = read_all(client, count)
        finally:
            client.close()
    finally:
        sa.stop()
    return run


def _quiet_logger() -> Any:
    import logging

    logger = logging.getLogger("offload-bench-client")
    logger.setLevel(logging.WARNING)
    return logger


def table(runs: list[DriverRun], args: argparse.Namespace) -> str:
    """The figures as a Markdown table."""
    count = max(1, args.mb * MB // args.size)
    lines = [
        f"{count:,} messages of {args.size} B ({args.mb} MB), batching "
        f"{'off' if args.no_batching else 'on'}, ledgers rolled at {args.ledger_mb} MB",
        "",
        "| driver | produce | offload | catch-up from bookies | catch-up from the tier |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        if r.skipped:
            lines.append(f"| {r.driver} | skipped: {r.skipped} | | | |")
            continue
        assert r.bookies and r.offload and r.tier
        lines.append(
            f"| {r.driver} | {count / r.produce_s:,.0f} msg/s | {r.offload.mb_s:.1f} MB/s "
            f"({r.offload.ledgers} ledgers, {r.offload.bytes / MB:.1f} MB in {r.offload.seconds:.2f} s) | "
            f"{r.bookies.mb_s:.1f} MB/s, {r.bookies.msg_s:,.0f} msg/s ({r.bookies.seconds:.2f} s) | "
            f"{r.tier.mb_s:.1f} MB/s, {r.tier.msg_s:,.0f} msg/s ({r.tier.seconds:.2f} s) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[DriverRun]:
    """Run the benchmark, print its table; returns the runs."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=256, help="MB (10^6 B) of message payload produced")
    ap.add_argument("--size", type=int, default=1024, help="bytes per message")
    ap.add_argument("--ledger-mb", type=int, default=4, help="managedLedgerMaxSizePerLedgerMbytes")
    ap.add_argument("--drivers", default=",".join(DRIVERS), help="comma-separated: filesystem, s3")
    ap.add_argument("--no-batching", action="store_true")
    args = ap.parse_args(argv)
    drivers = [d.strip() for d in args.drivers.split(",") if d.strip()]
    for d in drivers:
        if d not in DRIVERS:
            ap.error(f"unknown driver {d!r} (one of {', '.join(DRIVERS)})")
    runs: list[DriverRun] = []
    with tempfile.TemporaryDirectory(prefix="offload-bench-") as tmp:
        base = Path(tmp)
        for driver in drivers:
            if driver != "s3":
                runs.append(run_driver(driver, base, args, None))
                continue
            try:
                binary = build_s3_server()
            except Exception as exc:  # any build failure (no Go, no proxy) is reported in the table
                runs.append(DriverRun(driver, skipped=f"the S3 server could not be built: {str(exc)[:200]}"))
                continue
            s3 = S3Server.start_new(binary, base)
            try:
                s3.create_bucket(BUCKET)
                runs.append(run_driver(driver, base, args, s3))
            finally:
                s3.stop()
    print(table(runs, args))
    return runs


if __name__ == "__main__":
    main()
