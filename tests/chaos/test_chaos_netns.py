"""Test hosts in network namespaces (`tests.support.chaos.netns`) and a short chaos run over them:
two cycles on standalone that run every fault kind (isolate, cut, partition, pause, clock jump,
full disk, SIGKILL of the server and of a producer), every invariant checked (the longer runs,
clusters included, are ``bench/chaos.py --netns``; figures in bench/RESULTS.md).

These need root, iproute2, nftables and libfaketime (scripts/test installs the last two) and are
skipped, saying which is missing, where they are not there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.chaos.netns import PREFIX, TestNetwork, cleanup_leftovers, faketime_problem, netns_problem
from tests.support.chaos.run import ChaosRun, RunOptions

REPO = Path(__file__).resolve().parents[2]
_NETNS = netns_problem()
needs_netns = pytest.mark.skipif(bool(_NETNS), reason=f"test hosts: {_NETNS}")


def _namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _wait_gone(prefix: str, timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [ns for ns in _namespaces() if ns.startswith(prefix)]
        if not left:
            return []
        time.sleep(0.1)
    return left


@needs_netns
def test_hosts_reach_each_other_and_faults_cut_them(tmp_path: Path) -> None:
    net = TestNetwork()
    net.create()
    try:
        net.add_host("a")
        b = net.add_host("b")
        server = subprocess.Popen(
            [
                *b.wrap(),
                sys.executable,
                "-c",
                "import socket,sys\ns=socket.socket()\ns.bind((sys.argv[1],9000))\ns.listen()\n"
                "while True:\n c,_=s.accept()\n c.sendall(b'hi')\n c.close()",
                b.address,
            ]
        )

        def reaches(src: str) -> bool:
            code = f"import socket\ns=socket.create_connection(('{b.address}',9000),timeout=1)\nassert s.recv(2)==b'hi'"
            cmd = [*net.hosts[src].wrap(), sys.executable, "-c", code] if src else [sys.executable, "-c", code]
            return subprocess.run(cmd, capture_output=True).returncode == 0

        deadline = time.monotonic() + 10
        while not reaches("a") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert reaches("a") and reaches("")  # host to host, harness to host
        net.block("a", "b")
        assert not reaches("a") and reaches("")
        net.heal()
        assert reaches("a")
        net.set_link("b", False)
        assert not reaches("a") and not reaches("")
        net.heal()
        assert reaches("a")
        disk = net.disk("a", tmp_path, 4)
        net.fill_disk("a")
        with pytest.raises(OSError):
            (disk / "more").write_bytes(bytes(64 << 10))
        net.free_disk("a")
        (disk / "more").write_bytes(bytes(64 << 10))
        server.kill()
    finally:
        net.destroy()
    assert not [ns for ns in _namespaces() if ns.startswith(f"{PREFIX}{net.run}-")]
    assert f"{PREFIX}{net.run}-disk-a" not in Path("/proc/mounts").read_text()


@needs_netns
def test_a_sigkilled_harness_leaves_nothing_behind() -> None:
    # a harness that makes hosts, starts a process in one and is SIGKILLed: its reaper removes
    # the process, the namespaces and the bridge
    code = (
        "import sys,subprocess,time\nfrom tests.support.chaos.netns import TestNetwork\n"
        "n=TestNetwork(); n.create(); h=n.add_host('x')\n"
        "p=subprocess.Popen(h.wrap()+['sleep','600'])\n"
        "print(n.run, p.pid, flush=True)\ntime.sleep(600)\n"
    )
    harness = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert harness.stdout is not None
    run, pid = harness.stdout.readline().split()
    assert f"{PREFIX}{run}-x" in _namespaces()
    os.kill(harness.pid, signal.SIGKILL)
    harness.wait()
    assert _wait_gone(f"{PREFIX}{run}-") == []
    # the reaper deletes the bridge after the namespaces
    deadline = time.monotonic() + 30
    while _has_link(f"{PREFIX}{run}br") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _has_link(f"{PREFIX}{run}br")
    deadline = time.monotonic() + 10
    while _running(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(int(pid))


def _has_link(name: str) -> bool:
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return f" {name}:" in links or f" {name}@" in links


def _running(pid: int) -> bool:
    # a killed orphan may stay a zombie until whatever adopted it reaps it
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@needs_netns
def test_leftovers_of_a_dead_harness_are_removed_at_start() -> None:
    # a run named after a pid that no longer exists, as a harness killed with its reaper leaves it
    dead = subprocess.Popen(["true"])
    dead.wait()
    ns = f"{PREFIX}{dead.pid}z-left"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        removed = cleanup_leftovers()
        assert f"netns {ns}" in removed and ns not in _namespaces()
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.skipif(bool(_NETNS or faketime_problem()), reason=f"test hosts: {_NETNS or faketime_problem()}")
def test_every_fault_kind_on_standalone_in_test_hosts(tmp_path: Path) -> None:
    # two short cycles on standalone in test hosts, each fault in a slot of its own, that between
    # them run every network fault kind and both kills: a host cut off, a one-way cut, a pairwise
    # cut, the server paused past its session timeout, its clock jumped, a producer SIGKILLed;
    # then its disk filled and the server SIGKILLed. Every invariant is checked after each cycle
    # (the longer runs, clusters included, are bench/chaos.py --netns; figures in bench/RESULTS.md)
    schedule = (("isolate", "cut", "clock", "producer"), ("partition", "pause", "disk-full", "standalone"))
    options = RunOptions(
        deploy="standalone",
        netns=True,
        cycles=2,
        seed=6,
        duration_s=12.0,
        schedule=schedule,
        rate=20.0,
        dedup="on",
        batching="off",
        trim_topic=False,
        drain_timeout_s=60.0,
        session_timeout_ms=2000,
        disk_mb=64,
        workdir=tmp_path,
    )
    report = ChaosRun(options).run()
    kinds = {label.split()[0] for label in report.kills}
    assert kinds >= {"isolate", "cut", "partition", "pause", "clock", "disk-full", "kill"}, report.kills
    assert {"kill standalone", "kill producer"} <= set(report.kills), report.kills
    assert report.cycles_done == 2 and report.audited_entries > 0
    assert report.ok, [str(v) for v in report.violations]
    assert not report.stalls, report.stalls
