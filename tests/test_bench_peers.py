"""The yardstick against Apache Pulsar (bench/peers.py, bench/pulsar_dist.py), without a JVM.

What a comparison is worth rests on a few choices that a later edit could undo silently: Pulsar
started with the same durability as Magnetar, the same load shape sent to both, the goals read
the right way round. These check those choices; the run itself is bench/peers.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import peers, pulsar_dist


def test_pulsar_config_is_as_durable_as_magnetar_standalone() -> None:
    conf = pulsar_dist.standalone_conf(broker_port=41001, web_port=41002)
    # fsync before every acknowledgement (Pulsar's shipped standalone.conf turns it off)
    assert conf["journalSyncData"] == "true" and conf["journalWriteData"] == "true"
    # one bookie, one copy of each entry, as magnetar standalone with one bookie
    for key in ("managedLedgerDefaultEnsembleSize", "managedLedgerDefaultWriteQuorum", "managedLedgerDefaultAckQuorum"):
        assert conf[key] == "1"
    assert conf["defaultRetentionTimeInMinutes"] == conf["defaultRetentionSizeInMB"] == "0"
    assert conf["functionsWorkerEnabled"] == "false"
    # loopback and the ports given, never Pulsar's defaults
    assert conf["bindAddress"] == "127.0.0.1"
    assert (conf["brokerServicePort"], conf["webServicePort"]) == ("41001", "41002")


def test_written_config_is_a_properties_file(tmp_path: Path) -> None:
    conf_path, log4j = pulsar_dist.write_config(tmp_path, {"a": "1", "journalSyncData": "true"})
    assert conf_path.read_text().splitlines() == ["a=1", "journalSyncData=true"]
    assert str(tmp_path / "pulsar.log") in log4j.read_text()


def test_standalone_command_bounds_memory_and_skips_what_magnetar_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pulsar_dist, "fetch", lambda: (Path("/jdk/bin/java"), Path("/lib"), Path("/perf")))
    monkeypatch.setattr(pulsar_dist, "_java_major", lambda java: 25)
    cmd = pulsar_dist.PulsarStandalone(tmp_path).command()
    assert cmd[0] == "/jdk/bin/java"
    assert {"-Xmx1024m", "-XX:MaxDirectMemorySize=1024m", "--no-functions-worker", "--no-stream-storage"} <= set(cmd)
    assert cmd[cmd.index("-cp") + 2] == "org.apache.pulsar.PulsarStandaloneStarter"
    assert cmd[cmd.index("--config") + 1] == str(tmp_path / "standalone.conf")


def test_same_case_sends_the_same_shape_to_both_tools() -> None:
    unbatched_max = peers.CASE_KEYS["perf-u100"]
    args = peers._perf_args(unbatched_max, 20, "t")
    assert "-db" in args and args[args.index("-s") + 1] == "100"
    # a bounded number outstanding at full rate, and a warm-up interval before the measured ones
    assert args[args.index("-o") + 1] == str(peers.PERF_MAX_OUTSTANDING)
    assert int(args[args.index("-time") + 1]) > 20 + peers.PERF_INTERVAL_S
    fixed = peers._perf_args(peers.CASE_KEYS["perf-b100-r20k"], 20, "t")
    assert fixed[fixed.index("-r") + 1] == "20000" and "-db" not in fixed and "-o" not in fixed
    topics = peers._perf_args(peers.CASE_KEYS["perf-b100-t100"], 20, "t")
    assert topics[topics.index("-t") + 1] == "100"
    assert int(topics[topics.index("-o") + 1]) * 100 == peers.PERF_MAX_OUTSTANDING  # per producer
    native = peers._native_args(peers.CASE_KEYS["native-u100-r2k"], 20, "t")
    assert "--no-batching" in native and native[native.index("-r") + 1] == "2000"


def test_goals_read_each_ratio_the_right_way_round() -> None:
    assert peers.goal("perf-b100: msg/s") == (">=", 1.0)
    assert peers.goal("catchup-1g: read MB/s") == (">=", 1.0)
    assert peers.goal("native-u100-r2k: p99 ms") == ("<=", 1.0)
    assert peers.goal("idle RSS, MiB") == ("<=", 0.25)
    assert peers.goal("peak RSS under load, MiB") == ("<=", 0.25)
    assert peers.goal("start-up to first ack, s") == ("<=", 0.2)
    assert peers.goal("idle CPU, % of a core") == ("<=", 0.2)
    assert peers.goal("native-u100-r2k: p50 ms") is None
    table = peers.report(
        {
            "magnetar": {"perf-b100: msg/s": 50.0, "idle RSS, MiB": 10.0},
            "pulsar": {"perf-b100: msg/s": 100.0, "idle RSS, MiB": 100.0},
        },
        "header",
    )
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert rows[2] == "| perf-b100: msg/s | 50.00 | 100 | 0.50 | >= 1: **missed** |"
    assert rows[3] == "| idle RSS, MiB | 10.00 | 100 | 0.10 | <= 0.25: met |"


def test_case_selection_by_key_and_prefix() -> None:
    assert [c.key for c in peers.select_cases("perf-b100")] == ["perf-b100"]
    assert {c.key for c in peers.select_cases("catchup,native-u")} == {
        "catchup-1g",
        "native-u100",
        "native-u1k",
        "native-u100-r2k",
        "native-u1k-r2k",
    }
    assert peers.select_cases("none") == []
    with pytest.raises(SystemExit):
        peers.select_cases("no-such-case")


def test_pulsar_perf_rate_counts_between_interval_lines_by_their_stamps() -> None:
    # pulsar-perf's interval lines carry a running total, not the interval's count
    first = peers.Mark("19:17:18.617 INFO  Throughput produced:   31321 msg ---   2139.3 msg/s", at=100.0, cpu=1.0)
    last = peers.Mark("19:17:28.774 INFO  Throughput produced:   52443 msg ---   2021.9 msg/s", at=100.5, cpu=2.0)
    assert peers._interval_count(last) - peers._interval_count(first) == 21122
    assert peers._stamp_seconds(first, last) == pytest.approx(10.157)
    # across midnight, and without stamps (by when the lines were read)
    late = peers.Mark("23:59:59.000 x", at=0.0, cpu=0.0)
    early = peers.Mark("00:00:01.500 x", at=0.0, cpu=0.0)
    assert peers._stamp_seconds(late, early) == pytest.approx(2.5)
    assert peers._stamp_seconds(peers.Mark("a", 1.0, 0.0), peers.Mark("b", 3.5, 0.0)) == 2.5
