"""The chaos checker against made-up histories: each invariant is caught when broken and quiet
when what happened is allowed (redelivery, acks that raced a crash, re-sent batches)."""

from __future__ import annotations

from tests.support.chaos.checker import History, ScanResult, SeqSet, check_scan, resolve_order
from tests.support.clocks import FakeClock

T = "persistent://public/x/t"


def history(*subs: tuple[str, bool]) -> History:
    h = History(clock=FakeClock(0.0, step=1.0))
    for name, ordered in subs:
        h.add_subscription(T, name, ordered=ordered)
    h.add_producer(T, "p")
    return h


def pos(entry: int, ledger: int = 1, index: int = -1) -> tuple[int, int, int]:
    return (ledger, entry, index)


def kinds(h: History) -> list[str]:
    return [v.invariant for v in h.check()]


def test_seqset() -> None:
    s = SeqSet()
    assert s.add(5) and not s.add(5) and s.add(100_000)
    assert 5 in s and 4 not in s and -1 not in s and 10**9 not in s
    assert list(s) == [5, 100_000] and s.count == 2


def test_a_receipted_message_never_delivered_is_a_loss() -> None:
    h = history(("s", False))
    for i in range(3):
        h.receipt("p", i)
    h.delivered(T, "s", "c", ("p", 0), pos(0))
    h.delivered(T, "s", "c", ("p", 2), pos(2))
    [v] = h.check()
    assert v.invariant == "loss" and v.keys == (("p", 1),)
    assert h.check() == []  # reported once


def test_a_delivery_before_the_receipt_is_not_a_loss() -> None:
    h = history(("s", False))
    h.delivered(T, "s", "c", ("p", 0), pos(0))
    h.receipt("p", 0)
    assert h.check() == []


def test_an_unacked_message_not_redelivered_after_a_crash_is_a_skip() -> None:
    h = history(("s", False))
    for i in range(4):
        h.delivered(T, "s", "c", ("p", i), pos(i))
    h.acked(T, "s", ("p", 0), pos(0))
    h.acked(T, "s", ("p", 2), pos(2))
    with h.lock:
        h.crash_locked("kill")
    h.delivered(T, "s", "c", ("p", 1), pos(1))
    h.delivered(T, "s", "c", ("p", 2), pos(2))  # an acked one again: allowed
    [v] = h.check()
    assert v.invariant == "skip" and v.keys == (("p", 3),) and "after kill" in v.detail


def test_a_cumulative_ack_covers_what_came_before() -> None:
    h = history(("s", True))
    for i in range(5):
        h.delivered(T, "s", "c", ("p", i), pos(i))
    h.acked(T, "s", ("p", 3), pos(3), cumulative=True)
    with h.lock:
        h.crash_locked("kill")
    # 4 is owed; 0..3 are not, and one of them coming back is allowed
    h.delivered(T, "s", "c", ("p", 2), pos(2))
    assert [v.keys for v in h.check()] == [(("p", 4),)]
    # still unacked, so owed again at the next crash; a redelivered position under the
    # cumulative mark is not
    h.delivered(T, "s", "c", ("p", 1), pos(1))
    with h.lock:
        h.crash_locked("kill 2")
    assert [v.keys for v in h.check()] == [(("p", 4),)]
    h.delivered(T, "s", "c", ("p", 4), pos(4))
    h.acked(T, "s", ("p", 4), pos(4))
    with h.lock:
        h.crash_locked("kill 3")
    assert h.check() == []


def test_a_cumulative_ack_after_the_crash_discharges_what_it_covers() -> None:
    """A message the client queued before the crash is taken and acked cumulatively after it; the
    client sends that ack once reconnected, so the broker rightly skips what it covers."""
    h = history(("s", True))
    for i in range(4):
        h.delivered(T, "s", "c", ("p", i), pos(i))
    with h.lock:
        h.crash_locked("kill")
    h.delivered(T, "s", "c", ("p", 5), pos(5))
    h.acked(T, "s", ("p", 5), pos(5), cumulative=True)
    assert h.check() == []


def test_an_ack_of_another_copy_of_the_key_counts() -> None:
    h = history(("s", False))
    h.delivered(T, "s", "c", ("p", 0), pos(0))
    h.delivered(T, "s", "c", ("p", 0), pos(7))  # the same key stored twice
    h.acked(T, "s", ("p", 0), pos(0))
    with h.lock:
        h.crash_locked("kill")
    assert h.check() == []


def test_the_reported_defect_is_a_skip() -> None:
    """The user's report: 1,000 messages; ack 0..499 and the even ids of 500..599; clean restart;
    1,000..1,099; ack 600..1,049; SIGKILL; afterwards the odd ids of 501..599 never come back."""
    h = history(("s", False))
    for i in range(1000):
        h.receipt("p", i)
        h.delivered(T, "s", "c", ("p", i), pos(i))
    for i in range(1000):
        if i < 500 or (i < 600 and i % 2 == 0):
            h.acked(T, "s", ("p", i), pos(i))
    with h.lock:
        h.crash_locked("clean restart")
    for i in list(range(501, 600, 2)) + list(range(600, 1000)):
        h.delivered(T, "s", "c", ("p", i), pos(i))
    for i in range(1000, 1100):
        h.receipt("p", i)
        h.delivered(T, "s", "c", ("p", i), pos(i - 1000, ledger=2))
    for i in range(600, 1050):
        h.acked(T, "s", ("p", i), pos(i) if i < 1000 else pos(i - 1000, ledger=2))
    assert h.check() == []
    with h.lock:
        h.crash_locked("SIGKILL")
    for i in range(1050, 1100):  # the defect: only these come back
        h.delivered(T, "s", "c", ("p", i), pos(i - 1000, ledger=2))
    [v] = h.check()
    assert v.invariant == "skip" and [s for _, s in v.keys] == list(range(501, 600, 2))


def test_first_deliveries_out_of_order_on_an_ordered_subscription() -> None:
    h = history(("excl", True), ("shared", False))
    for sub in ("excl", "shared"):
        for i in (0, 2, 1, 3):
            h.delivered(T, sub, "c", ("p", i), pos(i))
    [v] = h.check()
    assert v.invariant == "order" and v.subscription == "excl" and v.keys == (("p", 1),)


def test_redeliveries_and_other_consumers_do_not_break_order() -> None:
    h = history(("fail", True))
    for i in range(5):
        h.delivered(T, "fail", "a", ("p", i), pos(i))
    for i in (1, 2, 5, 6):  # a rewind after a reconnect, then new messages
        h.delivered(T, "fail", "a", ("p", i), pos(i))
    for i in (3, 4, 7):  # the other consumer of a Failover subscription after a switch
        h.delivered(T, "fail", "b", ("p", i), pos(i))
    assert h.check() == []


def test_scan_finds_loss_disorder_and_duplicates() -> None:
    h = history(("s", False))
    for i in range(4):
        h.receipt("p", i)
    scan = ScanResult(T, [(pos(0), ("p", 0)), (pos(1), ("p", 2)), (pos(2), ("p", 1)), (pos(3), ("p", 2))])
    found, notes = check_scan(h, scan, dedup=True, batch_sizes={"p": 1})
    assert sorted(v.invariant for v in found) == ["duplicate", "loss", "order"]
    assert {v.invariant: v.keys for v in found} == {"loss": (("p", 3),), "order": (("p", 1),), "duplicate": (("p", 2),)}
    assert notes == []
    assert [v.invariant for v in check_scan(h, scan, dedup=False, batch_sizes={})[0]] == ["loss", "order"]


def test_scan_explains_duplicates_inside_a_re_sent_batch_of_another_shape() -> None:
    h = history()
    # batches of 4: [0..3] stored, then a re-sent [2..5] (not aligned): stored whole by design
    stored = [(pos(0, index=i), ("p", i)) for i in range(4)] + [(pos(1, index=i), ("p", 2 + i)) for i in range(4)]
    found, notes = check_scan(h, ScanResult(T, stored), dedup=True, batch_sizes={"p": 4})
    assert found == [] and len(notes) == 1
    # the same batch stored twice is a violation
    twice = [(pos(0, index=i), ("p", i)) for i in range(4)] + [(pos(1, index=i), ("p", i)) for i in range(4)]
    found, _ = check_scan(h, ScanResult(T, twice), dedup=True, batch_sizes={"p": 4})
    assert [v.invariant for v in found] == ["duplicate"]


def test_order_findings_explained_by_an_earlier_copy() -> None:
    h = history(("fail", True))
    h.delivered(T, "fail", "b", ("p", 1), pos(1))
    h.delivered(T, "fail", "b", ("p", 0), pos(2))  # a second copy of 0; the first (at 0) was acked by "a"
    found = h.check()
    assert [v.invariant for v in found] == ["order"]
    scan = ScanResult(T, [(pos(0), ("p", 0)), (pos(1), ("p", 1)), (pos(2), ("p", 0))])
    kept, explained = resolve_order(found, {T: scan})
    assert kept == [] and explained == 1
    kept, explained = resolve_order(found, {T: ScanResult(T, [(pos(1), ("p", 1)), (pos(2), ("p", 0))])})
    assert len(kept) == 1 and explained == 0
