"""A writer process for the crash tests: creates a ledger, prints ``ledger <id>``, waits for a
line on stdin (the test prepares the bookies meanwhile), adds ``count`` entries (``payload(i)``)
keeping them all in flight, prints ``acked <id>`` for each acknowledged one, then ``done`` and
waits to be killed (it never closes the ledger).

    python -m tests.bk_client_real.bkreal_writer <metadata-url> <E> <Qw> <Qa> <count>
"""

from __future__ import annotations

import sys

import trio

from bk_client import BookKeeper, ClientConfig
from metadata import open_metadata_store

PASSWORD = b"bkreal"


def payload(entry_id: int) -> bytes:
    """The bytes of entry ``entry_id`` (a few hundred bytes, distinct per entry)."""
    return (f"entry {entry_id:06d} ".encode()) * 20


async def main(url: str, e: int, qw: int, qa: int, count: int) -> None:
    # a long add timeout: a stopped bookie must stay in the ensemble (no ensemble change)
    cfg = ClientConfig(add_entry_timeout_s=120.0)
    async with open_metadata_store(url) as store, BookKeeper.open(store, config=cfg) as bk:
        lh = await bk.create_ledger(e, qw, qa, password=PASSWORD)
        print(f"ledger {lh.ledger_id}", flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)
        ops = [await lh.append(payload(i)) for i in range(count)]
        for op in ops:
            print(f"acked {await op.result()}", flush=True)
        print("done", flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    url, e, qw, qa, count = sys.argv[1], *map(int, sys.argv[2:6])
    trio.run(main, url, e, qw, qa, count)
