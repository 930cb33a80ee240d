"""Test hosts for the chaos run: one Linux network namespace per server and client process, made
by the harness with iproute2, so that faults can separate hosts rather than kill processes.

Layout of one run (``RUN`` = the harness's pid and a letter, so runs of one process differ):

* a bridge ``mgcRUNbr`` in the harness's own namespace with the address ``10.231.N.1/24``: the
  harness (its consumers, admin calls and audits) is the host ``.1``;
* per host a namespace ``mgcRUN-NAME`` holding one end of a veth pair (``eth0``, address
  ``10.231.N.k/24``, and ``lo``), the other end (``mgcRUNvK``) on the bridge.

Nothing leaves the machine: the bridge has no physical port, the namespaces have no route but
their /24, and the /24 is chosen unused by the harness's namespace. The addresses belong to this
run's namespaces only.

Faults (each undone by `heal`): `set_link` (a host cut off from everything: its ``eth0`` down),
`block` (one way: ``src`` drops every packet it sends to ``dst``, with an nftables rule in
``src``'s namespace, so nothing is refused, it is silently lost as in a real partition; both
ways for a pairwise cut), `fill_disk` (a tmpfs made full while its owner writes) and clock
files read by libfaketime (`ClockFile`).

Clean-up on every exit path: `TestNetwork.create` starts a reaper process (its own session)
that waits on a pipe only the harness holds; when the harness ends for any reason, SIGKILL
included, the pipe closes and the reaper kills every process left in the run's namespaces,
deletes them and the bridge and unmounts the run's tmpfs disks. `cleanup_leftovers` (called by
`create`) removes whatever runs of dead harnesses left behind, should a reaper have died too.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "PREFIX",
    "Host",
    "TestNetwork",
    "ClockFile",
    "netns_problem",
    "faketime_problem",
    "cleanup_leftovers",
    "cleanup_run",
    "FAKETIME_LIB",
]

PREFIX = "mgc"
FAKETIME_LIB = next(
    iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketimeMT.so.1"))),
    Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"),
)
_SHIM = Path(__file__).resolve().parent / "faketime_shim"
_NFT_TABLE = "magnetar_chaos"
_RUN_RE = re.compile(rf"^{PREFIX}(\d+[a-z])(?:-|br$|v\d+$)")
_letters = itertools.count()


def _run(*cmd: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(cmd), capture_output=True, text=True, input=input, timeout=60)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def netns_problem() -> str:
    """Why test hosts cannot be made here ('' when they can): root, iproute2 and nftables are
    needed, and ``ip netns add`` must work (it does not in every container)."""
    if os.geteuid() != 0:
        return f"network namespaces need root (running as uid {os.geteuid()})"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing (Debian's {'iproute2' if tool == 'ip' else 'nftables'} package)"
    probe = f"{PREFIX}probe{os.getpid()}"
    done = _run("ip", "netns", "add", probe, check=False)
    if done.returncode != 0:
        return f"`ip netns add` does not work here: {done.stderr.strip()}"
    try:
        nft = _run("ip", "netns", "exec", probe, "nft", "add", "table", "inet", _NFT_TABLE, check=False)
        if nft.returncode != 0:
            return f"nftables does not work in a network namespace here: {nft.stderr.strip()}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return ""


def faketime_problem() -> str:
    """Why clock jumps cannot be made here ('' when they can): Debian's libfaketime is needed."""
    return "" if FAKETIME_LIB.exists() else f"{FAKETIME_LIB} is missing (Debian's libfaketime package)"


# --- clean-up -------------------------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _namespaces() -> list[str]:
    out = _run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _links() -> list[str]:
    out = _run("ip", "-o", "link", "show", check=False).stdout
    return [m.group(1) for m in re.finditer(r"^\d+:\s+([^:@\s]+)", out, re.M)]


def _mounts() -> list[str]:
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return []
    return [line.split()[1].replace("\\040", " ") for line in lines if len(line.split()) > 1]


def cleanup_run(run: str) -> list[str]:
    """Remove everything of run ``run``: SIGKILL the processes in its namespaces, delete the
    namespaces and the bridge, unmount its disks. Idempotent; returns what it removed."""
    done: list[str] = []
    spaces = [ns for ns in _namespaces() if ns.startswith(f"{PREFIX}{run}-")]
    for ns in spaces:
        pids = [int(p) for p in _run("ip", "netns", "pids", ns, check=False).stdout.split() if p.isdigit()]
        for pid in pids:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        deadline = time.monotonic() + 10
        while pids and time.monotonic() < deadline and any(_pid_alive(p) and not _zombie(p) for p in pids):
            time.sleep(0.05)
    for ns in spaces:
        _run("ip", "netns", "del", ns, check=False)
        done.append(f"netns {ns}")
    for link in _links():
        if link == f"{PREFIX}{run}br" or re.fullmatch(rf"{PREFIX}{run}v\d+", link):
            _run("ip", "link", "del", link, check=False)
            done.append(f"link {link}")
    for mount in reversed(_mounts()):
        if f"/{PREFIX}{run}-disk-" in mount:
            _run("umount", "-l", mount, check=False)
            done.append(f"mount {mount}")
    return done


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def cleanup_leftovers() -> list[str]:
    """Remove the namespaces, bridges and disks of runs whose harness is no longer alive (a run
    is named after its harness's pid); runs of live harnesses are left alone."""
    runs = set()
    for name in [*_namespaces(), *_links()]:
        m = _RUN_RE.match(name)
        if m:
            runs.add(m.group(1))
    for mount in _mounts():
        m = re.search(rf"/{PREFIX}(\d+[a-z])-disk-", mount)
        if m:
            runs.add(m.group(1))
    removed: list[str] = []
    for run in sorted(runs):
        pid = int(run[:-1])
        if pid != os.getpid() and _pid_alive(pid) and not _zombie(pid):
            continue
        removed += cleanup_run(run)
    return removed


# --- the network ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Host:
    """One test host: its namespace, address and the bridge end of its veth pair."""

    name: str
    ns: str
    address: str
    veth: str

    def wrap(self) -> list[str]:
        """The command prefix that runs a program in this host's namespace (``ip netns exec``
        execs the program, so its pid is the program's)."""
        return ["ip", "netns", "exec", self.ns]


class ClockFile:
    """The wall-clock offset of one process under libfaketime (``FAKETIME_TIMESTAMP_FILE``): the
    process reads it at most once a second. Only the wall clock moves (the monotonic clock is
    left alone, as an NTP step leaves it); `env` is what the process must be started with."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset_s = 0
        self.set(0)

    def set(self, offset_s: int) -> None:
        """Make the process's wall clock run ``offset_s`` seconds from the real one."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{offset_s:+d}\n")
        tmp.replace(self.path)
        self.offset_s = offset_s

    def env(self) -> dict[str, str]:
        # libfaketime's clock_nanosleep on an absolute monotonic deadline fails with EINVAL when
        # the monotonic clock is not faked; the shim's sitecustomize gives Python a time.sleep
        # that waits on select instead (kazoo's reconnect loop sleeps with it)
        path = os.environ.get("PYTHONPATH", "")
        return {
            "LD_PRELOAD": str(FAKETIME_LIB),
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_CACHE_DURATION": "1",
            "PYTHONPATH": f"{_SHIM}{os.pathsep}{path}" if path else str(_SHIM),
        }


class TestNetwork:
    """The hosts of one run (module header). `create` first; `destroy` at the end (the reaper
    does it if the harness cannot)."""

    __test__ = False  # not a pytest class

    def __init__(self) -> None:
        self.run = f"{os.getpid()}{'abcdefghijklmnopqrstuvwxyz'[next(_letters) % 26]}"
        self.bridge = f"{PREFIX}{self.run}br"
        self.subnet = ""
        self.harness_address = ""
        self.hosts: dict[str, Host] = {}
        self.blocked: dict[str, set[str]] = {}  # host name -> names of hosts it cannot send to
        self.down: set[str] = set()
        self.disks: dict[str, Path] = {}
        self.reaper: subprocess.Popen[bytes] | None = None

    # --- set-up and tear-down ---------------------------------------------------------------------

    def _free_subnet(self) -> str:
        routes = _run("ip", "-o", "-4", "route", "show", "table", "all", check=False).stdout
        used = set(re.findall(r"10\.231\.(\d+)\.", routes))
        start = os.getpid() % 250
        for i in range(250):
            n = (start + i) % 250 + 1
            if str(n) not in used:
                return f"10.231.{n}"
        raise RuntimeError("no free 10.231.N.0/24 subnet for the test hosts")

    def create(self) -> None:
        """Remove leftovers of dead runs, start the reaper, make the bridge."""
        problem = netns_problem()
        if problem:
            raise RuntimeError(problem)
        cleanup_leftovers()
        self.reaper = subprocess.Popen(
            [sys.executable, "-m", "tests.support.chaos.netns", "reap", self.run],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=Path(__file__).resolve().parents[3],
            start_new_session=True,
        )
        self.subnet = self._free_subnet()
        self.harness_address = f"{self.subnet}.1"
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.harness_address}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")

    def add_host(self, name: str) -> Host:
        """A new namespace on the bridge with the next address."""
        index = len(self.hosts) + 2
        if index > 254:
            raise RuntimeError("at most 253 test hosts")
        host = Host(name, f"{PREFIX}{self.run}-{name}", f"{self.subnet}.{index}", f"{PREFIX}{self.run}v{index}")
        _run("ip", "netns", "add", host.ns)
        _run("ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.ns)
        _run("ip", "link", "set", host.veth, "master", self.bridge, "up")
        _run("ip", "-n", host.ns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _run("ip", "-n", host.ns, "link", "set", "eth0", "up")
        _run("ip", "-n", host.ns, "link", "set", "lo", "up")
        self.hosts[name] = host
        self.blocked[name] = set()
        return host

    def destroy(self) -> None:
        """Kill what runs in the hosts, delete them, the bridge and the disks; stop the reaper."""
        cleanup_run(self.run)
        if self.reaper is not None:
            with contextlib.suppress(OSError):
                assert self.reaper.stdin is not None
                self.reaper.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.reaper.wait(30)

    # --- faults -----------------------------------------------------------------------------------

    def set_link(self, name: str, up: bool) -> None:
        """Cut ``name`` off from every other host (``up`` False) or reconnect it."""
        host = self.hosts[name]
        _run("ip", "-n", host.ns, "link", "set", "eth0", "up" if up else "down")
        (self.down.discard if up else self.down.add)(name)

    def block(self, src: str, dst: str, blocked: bool = True) -> None:
        """``src`` loses (``blocked``) or regains every packet it sends to ``dst``."""
        (self.blocked[src].add if blocked else self.blocked[src].discard)(dst)
        self._write_rules(src)

    def _write_rules(self, name: str) -> None:
        host = self.hosts[name]
        targets = sorted(self.hosts[d].address for d in self.blocked[name])
        rule = f"ip daddr {{ {', '.join(targets)} }} drop" if targets else ""
        script = (
            f"table inet {_NFT_TABLE} {{}}\ndelete table inet {_NFT_TABLE}\n"
            f"table inet {_NFT_TABLE} {{\n chain out {{\n  type filter hook output priority 0; policy accept;\n"
            f"  {rule}\n }}\n}}\n"
        )
        _run("ip", "netns", "exec", host.ns, "nft", "-f", "-", input=script)

    def heal(self) -> None:
        """Every link up, every block lifted, every disk emptied of its filler."""
        for name in list(self.down):
            self.set_link(name, True)
        for name, dsts in self.blocked.items():
            if dsts:
                dsts.clear()
                self._write_rules(name)
        for name in self.disks:
            self.free_disk(name)

    # --- disks ------------------------------------------------------------------------------------

    def disk(self, name: str, parent: Path, size_mb: int) -> Path:
        """A tmpfs of ``size_mb`` for host ``name`` under ``parent`` (unmounted by clean-up)."""
        path = parent / f"{PREFIX}{self.run}-disk-{name}"
        path.mkdir(parents=True, exist_ok=True)
        _run("mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path))
        self.disks[name] = path
        return path

    def fill_disk(self, name: str) -> int:
        """Fill host ``name``'s disk to the last byte with a filler file; the bytes written."""
        filler = self.disks[name] / "chaos-filler"
        written = 0
        with open(filler, "ab", buffering=0) as f:
            for chunk in (1 << 20, 1 << 12, 1 << 9):
                block = bytes(chunk)
                while True:
                    try:
                        written += f.write(block)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        return written

    def free_disk(self, name: str) -> None:
        """Remove the filler of host ``name``'s disk."""
        with contextlib.suppress(FileNotFoundError):
            (self.disks[name] / "chaos-filler").unlink()


def _reap(run: str) -> int:
    """The reaper: wait until the harness closes the pipe (or dies), then clean the run up."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        sys.stdin.buffer.read()
    cleanup_run(run)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "reap":
        sys.exit(_reap(sys.argv[2]))
    if len(sys.argv) == 2 and sys.argv[1] == "cleanup":
        print("\n".join(cleanup_leftovers()) or "nothing left over")
        sys.exit(0)
    print("usage: python -m tests.support.chaos.netns reap RUN | cleanup", file=sys.stderr)
    sys.exit(2)
