"""The storage audit's choice of entries to read back when a cycle has more receipts than it reads."""

from __future__ import annotations

from typing import Any

from tests.support.chaos.audit import StorageAudit


class _EmptyView:
    def get(self, path: str) -> bytes | None:
        return None

    def children(self, path: str) -> list[str]:
        return []

    def close(self) -> None:
        pass


def _reads(ledgers: dict[int, int]) -> list[Any]:
    return [("t", lid, None, e, [("p", e)]) for lid, n in ledgers.items() for e in range(n)]


def test_every_entry_is_read_when_few() -> None:
    audit = StorageAudit(_EmptyView(), set(), max_reads=100)
    reads = _reads({1: 30, 2: 40})
    assert audit._pick(reads) == reads


def test_a_capped_audit_reads_each_ledgers_ends_and_a_spread() -> None:
    audit = StorageAudit(_EmptyView(), set(), max_reads=200)
    picked = audit._pick(_reads({1: 1000, 2: 3, 3: 2000}))
    got = {(r[1], r[3]) for r in picked}
    assert len(picked) == 200
    for lid, n in ((1, 1000), (3, 2000)):
        assert {(lid, 0), (lid, 1)} <= got and {(lid, e) for e in range(n - 10, n)} <= got
    assert {(2, 0), (2, 1), (2, 2)} <= got
    middle = [e for lid, e in got if lid == 3 and 100 < e < 1900]
    assert len(middle) > 20  # the rest is spread, not only the ends
