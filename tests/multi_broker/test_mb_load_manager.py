"""The load manager's pure decisions: threshold shedding and auto bundle splits."""

from __future__ import annotations

from broker.cluster._load_manager import ShedPolicy, SplitPolicy, plan_shedding, plan_splits, smoothed_load


def _stats(**bundles: float) -> dict:
    return {f"t/ns/{k}": {"msgThroughputIn": v, "msgThroughputOut": 0.0, "topics": 3} for k, v in bundles.items()}


def test_overloaded_broker_sheds_its_largest_bundles_until_enough() -> None:
    loads = {"a:1": 90.0, "b:1": 10.0, "c:1": 20.0}
    reports = {"a:1": {"bundleStats": _stats(x=600.0, y=300.0, z=100.0)}, "b:1": {"bundleStats": _stats(w=5.0)}}
    d = plan_shedding(loads, reports, ShedPolicy(threshold_pct=10))
    # avg 40, excess 40 of 90 -> shed 44% of 1000 B/s: the 600 B/s bundle alone is enough
    assert [(x.action, x.broker, x.bundle) for x in d] == [("unload", "a:1", "t/ns/x")]
    assert "average 40%" in d[0].reason


def test_no_shedding_within_threshold_alone_or_last_bundle() -> None:
    reports = {"a:1": {"bundleStats": _stats(x=600.0, y=300.0)}}
    assert plan_shedding({"a:1": 45.0, "b:1": 35.0}, reports, ShedPolicy(threshold_pct=10)) == []
    assert plan_shedding({"a:1": 95.0}, reports, ShedPolicy()) == []
    one = {"a:1": {"bundleStats": _stats(x=600.0)}}
    assert plan_shedding({"a:1": 95.0, "b:1": 0.0}, one, ShedPolicy()) == []


def test_recently_moved_bundles_stay() -> None:
    reports = {"a:1": {"bundleStats": _stats(x=600.0, y=300.0, z=100.0)}}
    d = plan_shedding({"a:1": 90.0, "b:1": 10.0}, reports, ShedPolicy(), recently_moved={"t/ns/x"})
    # avg 50, excess 30 of 90 -> 333 B/s to shed: y (300) then z (100); x stays although largest
    assert [x.bundle for x in d] == ["t/ns/y", "t/ns/z"]


def test_smoothing_weights_history() -> None:
    assert smoothed_load(None, 50.0, 0.9) == 50.0
    assert abs(smoothed_load(10.0, 110.0, 0.9) - 20.0) < 1e-9


def test_hot_bundles_split_within_the_namespace_limit() -> None:
    reports = {
        "a:1": {
            "bundleStats": {
                "t/ns/0x00000000_0x80000000": {"topics": 5, "msgRateIn": 40000.0},
                "t/ns/0x80000000_0xffffffff": {"topics": 1, "msgRateIn": 90000.0},  # one topic: cannot split
                "t/other/0x00000000_0xffffffff": {"topics": 2000},
            }
        }
    }
    d = plan_splits(reports, {"t/ns": 2, "t/other": 1}, SplitPolicy())
    assert [(x.bundle, x.reason) for x in d] == [
        ("t/ns/0x00000000_0x80000000", "40000 msg/s > 30000"),
        ("t/other/0x00000000_0xffffffff", "2000 topics > 1000"),
    ]
    assert plan_splits(reports, {"t/ns": 128, "t/other": 128}, SplitPolicy()) == []
