"""The bookie hop inside one process: CPU per entry over the network transport (loopback TCP)
and over the in-process one (`magnetar._inprocess.InProcessTransport`), the two ways ``magnetar
standalone``'s broker can reach its own bookie.

One process runs a whole bookie (`serve_bookie_process`: journal with fsync before every
acknowledgement, storage, registration in an embedded metadata store, as standalone runs it)
and a BookKeeper client; one task appends ``--entries`` entries of ``--size`` bytes to a ledger
(E = Qw = Qa = 1, up to ``--window`` in flight, as the broker's managed ledger issues them) and
waits for every acknowledgement. The figure is the process's CPU time (every thread: client,
bookie, journal) over the entries, so it holds on a loaded machine, where wall-clock rates do
not; the transports alternate for ``--rounds`` rounds and the median is printed, with how many
entries each journal sync carried (fewer per sync costs more CPU per entry, whatever the transport).

An entry is one message when the producer does not batch, and a whole batch when it does: the
saving per batched message is the saving per entry over the batch size.

    .venv/bin/python bench/inprocess_bench.py [--entries 20000] [--size 100] [--window 1000] [--rounds 3]

Asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bk_client import BookKeeper, ClientConfig, PendingAdd
from bookie import BookieEndpoints, serve_bookie_process
from magnetar._inprocess import in_process_transport
from metadata import open_metadata_store
from tests.support.bookie_server import make_config


def _journal_syncs(ep: BookieEndpoints) -> float:
    assert ep.core is not None
    return ep.core.registry.get_sample_value("bookie_journal_JOURNAL_SYNC_count") or 0.0


async def one_run(
    ep: BookieEndpoints, url: str, kind: str, entries: int, size: int, window: int
) -> tuple[float, float, float]:
    """(CPU us per entry, entries per second, entries per journal sync) for one ledger of
    ``entries`` adds."""
    transport = in_process_transport({ep.bookie_id: ep.core}) if kind == "in-process" and ep.core else None
    config = ClientConfig(max_in_flight_adds=window, max_pending_requests_per_bookie=max(1000, 2 * window))
    payload = b"x" * size
    async with open_metadata_store(url) as store, BookKeeper.open(store, config=config, transport=transport) as bk:
        lh = await bk.create_ledger(1, 1, 1, password=b"bench")
        for _ in range(200):  # warm-up: connection, first journal records, code paths
            await lh.add_entry(payload)
        cpu0, t0, syncs0 = time.process_time(), time.perf_counter(), _journal_syncs(ep)
        ops: list[PendingAdd] = []
        for _ in range(entries):
            ops.append(await lh.append(payload))
        for op in ops:
            await op.result()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
        syncs = _journal_syncs(ep) - syncs0
        await lh.close()
    return cpu / entries * 1e6, entries / wall, entries / max(syncs, 1.0)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="inprocess-bench-") as tmp:
        url = f"embedded://{tmp}/metadata"
        cfg = make_config(
            Path(tmp) / "bookie",
            metadata_url=url,
            journal_prealloc_size_mb=16,
            write_cache_max_mb=64,
            read_cache_max_mb=16,
        )
        async with trio.open_nursery() as nursery:
            ep: BookieEndpoints = await nursery.start(serve_bookie_process, cfg)
            results: dict[str, list[tuple[float, float, float]]] = {"network": [], "in-process": []}
            for r in range(args.rounds):
                for kind in ("network", "in-process"):
                    cpu, rate, group = await one_run(ep, url, kind, args.entries, args.size, args.window)
                    results[kind].append((cpu, rate, group))
                    print(
                        f"round {r + 1} {kind:<10}: {cpu:6.1f} us CPU per entry, {rate:8.0f} entries/s, "
                        f"{group:6.1f} entries per journal sync",
                        flush=True,
                    )
            nursery.cancel_scope.cancel()
    print()
    net = statistics.median(c for c, _, _ in results["network"])
    local = statistics.median(c for c, _, _ in results["in-process"])
    print(
        f"median CPU per {args.size} B entry (client + bookie, one process): network {net:.1f} us, "
        f"in-process {local:.1f} us ({local - net:+.1f} us, {100 * (local - net) / net:+.0f} %)"
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    trio.run(main, ap.parse_args())
