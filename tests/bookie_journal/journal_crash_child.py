"""Child process of the crash test: journal records forever, print each acknowledged one.

    python -m tests.bookie_journal.journal_crash_child DIR FIRST_LEDGER

Prints ``ledger entry`` on stdout after each add returns, and flushes, so that every line the
parent reads is a record the journal acknowledged. Runs until killed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

from bookie.journal import Journal, JournalConfig
from tests.bookie_journal.journal_helpers import payload


async def main(base: Path, first_ledger: int) -> None:
    cfg = JournalConfig(max_file_size=256 * 1024, prealloc_size=64 * 1024, max_group_wait_ms=1)
    journal = await Journal.open(base / "journal", [base / "ledgers0", base / "ledgers1"], cfg)
    await journal.replay()
    out = sys.stdout

    async def adder(ledger: int) -> None:
        entry = 0
        while True:
            await journal.log_add_entry(ledger, entry, payload(ledger, entry, 10 + (entry * 37 + ledger) % 3000))
            out.write(f"{ledger} {entry}\n")
            out.flush()
            entry += 1

    async with journal.running():
        out.write("ready\n")
        out.flush()
        async with trio.open_nursery() as nursery:
            for ledger in range(first_ledger, first_ledger + 32):
                nursery.start_soon(adder, ledger)


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), int(sys.argv[2]))
