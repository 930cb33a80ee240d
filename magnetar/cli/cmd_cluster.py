"""``magnetar cluster start|stop|status``: a local multi-broker cluster on one machine.

``start`` launches, each as its own process (own session, log under ``DIR/logs``): ZooKeeper
(Debian's ``zookeeper`` package and Java) unless ``--metadata-url`` names a running one, the
bookies, AutoRecovery and N brokers, every broker and bookie on its own ports so that all of
the machine's cores can be used (one Python process per broker). The components read the same
config files a real deployment uses (``--broker-conf deploy/broker.toml``,
``--bookie-conf deploy/bookie.toml``); the launcher only adds each process's ports and
directories as flags (the TLS ports too, with ``--broker-tls-port`` / ``--web-tls-port``: a
port in the shared config would collide); ``--broker-set``, ``--bookie-set`` and
``--autorecovery-set`` (with ``--autorecovery-conf``) add keys per kind, as a secured cluster's
ZooKeeper credential. It returns once AutoRecovery runs and every broker serves, after writing
``DIR/cluster.json`` (pids, URLs, TLS URLs), which ``stop`` and ``status`` read.

``stop`` ends the processes by pid, in order: brokers first (SIGTERM: each unloads its bundles
so that clients move to the others), then AutoRecovery, the bookies (SIGTERM: journals synced)
and ZooKeeper; a process still running after ``--timeout`` seconds is SIGKILLed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ._help import HelpGroup

__all__ = ["command"]

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_SIMPLE_JAR = Path("/usr/share/java/slf4j-simple.jar")
_BROKER_READY = re.compile(r"magnetar broker: (pulsar://\S+)\s+admin REST: (http://\S+)")
_BROKER_TLS = re.compile(r"TLS: (pulsar\+ssl://\S+|off)\s+admin REST TLS: (https://\S+|off)")
_STATE = "cluster.json"


def _ruok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(b"ruok")
            return sock.recv(16) == b"imok"
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours (we do not reap after start) counts as ended
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def _spawn(name: str, cmd: list[str], logs: Path, cwd: Path) -> dict[str, Any]:
    log_path = logs / f"{name}.log"
    # the children import the same Magnetar as this command (a checkout run from its directory
    # would otherwise lose to an installed copy once the child's cwd is the data directory)
    code_root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (code_root, os.environ.get("PYTHONPATH", "")) if p)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path},
        )
    return {"name": name, "pid": proc.pid, "log": str(log_path), "cmd": cmd}


def _wait(what: str, check: Any, proc: dict[str, Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        if not _alive(proc["pid"]):
            break
        time.sleep(0.1)
    tail = Path(proc["log"]).read_text(errors="replace")[-2000:] if Path(proc["log"]).exists() else ""
    raise click.ClickException(f"{what} did not start (log {proc['log']}):\n{tail}")


def _stop(procs: list[dict[str, Any]], timeout: float) -> None:
    """SIGTERM each group of processes, wait for it, SIGKILL what lingers; in the order given."""
    for p in procs:
        if _alive(p["pid"]):
            try:
                os.kill(p["pid"], signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + timeout
            while _alive(p["pid"]) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(p["pid"]):
                click.echo(f"{p['name']} (pid {p['pid']}) still runs after {timeout:.0f} s: SIGKILL", err=True)
                os.kill(p["pid"], signal.SIGKILL)
        click.echo(f"stopped {p['name']}")


def _start_zookeeper(
    directory: Path, zk_port: int, logs: Path, procs: list[dict[str, Any]], save: Callable[[], None], timeout: float
) -> str:
    """Start the cluster's own ZooKeeper, wait until it answers, and return its metadata URL."""
    if not ZOOKEEPER_JAR.exists():
        raise click.ClickException(
            f"ZooKeeper is not installed ({ZOOKEEPER_JAR} missing: apt-get install "
            "zookeeper), or pass --metadata-url of a running one"
        )
    zk_dir = directory / "zookeeper"
    (zk_dir / "data").mkdir(parents=True, exist_ok=True)
    cfg = zk_dir / "zoo.cfg"
    cfg.write_text(
        f"tickTime=2000\ndataDir={zk_dir / 'data'}\nclientPort={zk_port}\n"
        "clientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr,stat,mntr\n"
    )
    cp = ":".join(str(j) for j in (ZOOKEEPER_JAR, SLF4J_SIMPLE_JAR) if j.exists())
    zk = _spawn(
        "zookeeper",
        ["java", "-Xmx256m", "-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
        logs,
        zk_dir,
    )
    procs.append(zk)
    save()
    _wait("ZooKeeper", lambda: _ruok(zk_port), zk, timeout)
    return f"zk://127.0.0.1:{zk_port}/magnetar"


def _start_brokers(
    py: list[str],
    metadata_url: str,
    n_brokers: int,
    broker_port: int,
    web_port: int,
    broker_tls_port: int | None,
    web_tls_port: int | None,
    broker_conf: Path | None,
    broker_sets: tuple[str, ...],
    logs: Path,
    directory: Path,
    procs: list[dict[str, Any]],
    save: Callable[[], None],
    timeout: float,
) -> list[dict[str, Any]]:
    """Start the brokers, wait until each serves, and return their URLs (plain and TLS) by name."""
    brokers_ready: list[dict[str, Any]] = []
    brokers = []
    for i in range(n_brokers):
        cmd = [
            *py,
            "broker",
            "--metadata-url",
            metadata_url,
            "--port",
            str(broker_port + i if broker_port else 0),
            "--web-port",
            str(web_port + i if web_port else 0),
        ]
        if broker_conf is not None:
            cmd += ["--conf", str(broker_conf.resolve())]
        for s in broker_sets:
            cmd += ["--set", s]
        # TLS ports per broker, like the plain ones (a port in the shared config would collide)
        for key, base_port in (("brokerServicePortTls", broker_tls_port), ("webServicePortTls", web_tls_port)):
            if base_port is not None:
                cmd += ["--set", f"broker.{key}={base_port + i if base_port else 0}"]
        brokers.append(_spawn(f"broker-{i}", cmd, logs, directory))
    procs.extend(brokers)
    save()
    for b in brokers:
        m = _wait(b["name"], lambda b=b: _BROKER_READY.search(Path(b["log"]).read_text(errors="replace")), b, timeout)
        entry = {"name": b["name"], "service_url": m.group(1), "admin_url": m.group(2)}

        def tls_line(b: dict[str, Any] = b) -> re.Match[str] | None:
            return _BROKER_TLS.search(Path(b["log"]).read_text(errors="replace"))

        # the TLS URLs follow the ready line (a separate write): wait for them when asked for
        tls = _wait(b["name"], tls_line, b, timeout) if (broker_tls_port, web_tls_port) != (None, None) else tls_line()
        if tls:
            entry |= {"service_url_tls": tls.group(1), "admin_url_tls": tls.group(2)}
        brokers_ready.append(entry)
    return brokers_ready


@click.group(name="cluster", cls=HelpGroup)
def command() -> None:
    """A local cluster: ZooKeeper, bookies, AutoRecovery and N brokers as separate processes."""


@command.command("start")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("cluster-data"),
    show_default=True,
    help="Data, logs and cluster.json of the cluster.",
)
@click.option("--brokers", "n_brokers", type=click.IntRange(1, 64), default=2, show_default=True)
@click.option("--bookies", "n_bookies", type=click.IntRange(1, 16), default=3, show_default=True)
@click.option(
    "--metadata-url", default=None, help="Use this running ZooKeeper (zk://host:port/chroot) instead of starting one."
)
@click.option("--zk-port", type=int, default=2181, show_default=True, help="Port of the ZooKeeper started here.")
@click.option(
    "--broker-port",
    type=int,
    default=6650,
    show_default=True,
    help="Protocol port of broker 0; broker i listens on broker-port + i (0: free ports).",
)
@click.option(
    "--web-port",
    type=int,
    default=8080,
    show_default=True,
    help="Admin REST port of broker 0; broker i on web-port + i (0: free ports).",
)
@click.option(
    "--broker-tls-port",
    type=int,
    default=None,
    help="brokerServicePortTls (pulsar+ssl://) of broker 0; broker i on broker-tls-port + i (0: free "
    "ports; default: as the broker config says). Needs the tls* keys in --broker-conf.",
)
@click.option(
    "--web-tls-port",
    type=int,
    default=None,
    help="webServicePortTls (https) of broker 0; broker i on web-tls-port + i (0: free ports).",
)
@click.option("--bookie-port", type=int, default=3181, show_default=True, help="Port of bookie 0 (+i).")
@click.option("--bookie-http-port", type=int, default=8000, show_default=True, help="HTTP port of bookie 0 (+i).")
@click.option(
    "--broker-conf",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="broker.toml every broker reads (see deploy/broker.toml).",
)
@click.option(
    "--bookie-conf",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="bookie.toml every bookie reads (see deploy/bookie.toml).",
)
@click.option("--bookie-set", "bookie_sets", multiple=True, metavar="KEY=VALUE", help="--set passed to every bookie.")
@click.option("--no-autorecovery", is_flag=True, help="Do not start AutoRecovery.")
@click.option(
    "--autorecovery-conf",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="TOML file with [autorecovery] and [bk_client] tables AutoRecovery reads (its ZooKeeper "
    "credentials, its bookie client's TLS).",
)
@click.option(
    "--autorecovery-set",
    "autorecovery_sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="--set passed to AutoRecovery (an [autorecovery] key).",
)
@click.option(
    "--broker-set", "broker_sets", multiple=True, metavar="TABLE.KEY=VALUE", help="--set passed to every broker."
)
@click.option("--timeout", type=float, default=90.0, show_default=True, help="Seconds each process has to start.")
def start(
    directory: Path,
    n_brokers: int,
    n_bookies: int,
    metadata_url: str | None,
    zk_port: int,
    broker_port: int,
    web_port: int,
    broker_tls_port: int | None,
    web_tls_port: int | None,
    bookie_port: int,
    bookie_http_port: int,
    broker_conf: Path | None,
    bookie_conf: Path | None,
    bookie_sets: tuple[str, ...],
    no_autorecovery: bool,
    autorecovery_conf: Path | None,
    autorecovery_sets: tuple[str, ...],
    broker_sets: tuple[str, ...],
    timeout: float,
) -> None:
    """Start the cluster and return once every broker serves."""
    directory = directory.resolve()
    state_path = directory / _STATE
    if state_path.exists():
        running = [p for p in json.loads(state_path.read_text())["processes"] if _alive(p["pid"])]
        if running:
            raise click.ClickException(
                f"a cluster already runs from {directory} (pids "
                f"{', '.join(str(p['pid']) for p in running)}): stop it first"
            )
    logs = directory / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    py = [sys.executable, "-m", "magnetar"]
    procs: list[dict[str, Any]] = []
    state: dict[str, Any] = {"processes": procs, "brokers": []}

    def save() -> None:
        state_path.write_text(json.dumps(state, indent=2))

    try:
        if metadata_url is None:
            metadata_url = _start_zookeeper(directory, zk_port, logs, procs, save, timeout)
        state["metadata_url"] = metadata_url
        for i in range(n_bookies):
            base = directory / f"bookie-{i}"
            cmd = [
                *py,
                "bookie",
                "--journal-dir",
                str(base / "journal"),
                "--ledger-dirs",
                str(base / "ledgers"),
                "--port",
                str(bookie_port + i if bookie_port else 0),
                "--http-port",
                str(bookie_http_port + i if bookie_http_port else 0),
                "--metadata-url",
                metadata_url,
            ]
            if bookie_conf is not None:
                cmd += ["--conf", str(bookie_conf.resolve())]
            cmd += [x for kv in bookie_sets for x in ("--set", kv)]
            procs.append(_spawn(f"bookie-{i}", cmd, logs, directory))
            save()
        for p in procs[-n_bookies:]:
            _wait(p["name"], lambda p=p: "listening on" in Path(p["log"]).read_text(errors="replace"), p, timeout)
        if not no_autorecovery:
            cmd = [*py, "autorecovery", "--metadata-url", metadata_url]
            if autorecovery_conf is not None:
                cmd += ["--conf", str(autorecovery_conf.resolve())]
            cmd += [x for kv in autorecovery_sets for x in ("--set", kv)]
            ar = _spawn("autorecovery", cmd, logs, directory)
            procs.append(ar)
            save()
            _wait("AutoRecovery", lambda: " running on " in Path(ar["log"]).read_text(errors="replace"), ar, timeout)
        state["brokers"] = _start_brokers(
            py,
            metadata_url,
            n_brokers,
            broker_port,
            web_port,
            broker_tls_port,
            web_tls_port,
            broker_conf,
            broker_sets,
            logs,
            directory,
            procs,
            save,
            timeout,
        )
        save()
    except BaseException:
        _stop([*reversed(procs)], 30)
        state_path.unlink(missing_ok=True)
        raise
    click.echo(f"cluster running from {directory} (metadata {metadata_url})")
    for b in state["brokers"]:
        click.echo(f"  {b['name']}: {b['service_url']}  admin REST: {b['admin_url']}")
        if "service_url_tls" in b:
            click.echo(f"    TLS: {b['service_url_tls']}  admin REST TLS: {b['admin_url_tls']}")
    urls = ",".join(b["service_url"].split("://", 1)[1] for b in state["brokers"])
    click.echo(f"clients: pulsar://{urls}   stop with: magnetar cluster stop --dir {directory}")


def _load(directory: Path) -> dict[str, Any]:
    path = directory.resolve() / _STATE
    if not path.exists():
        raise click.ClickException(f"no cluster was started from {directory} ({path} is missing)")
    return dict(json.loads(path.read_text()))


@command.command("stop")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("cluster-data"),
    show_default=True,
)
@click.option(
    "--timeout", type=float, default=60.0, show_default=True, help="Seconds each process has to stop before SIGKILL."
)
def stop(directory: Path, timeout: float) -> None:
    """Stop the cluster: brokers (they hand their bundles over), AutoRecovery, bookies, ZooKeeper."""
    state = _load(directory)
    procs = state["processes"]
    order = (
        [p for p in procs if p["name"].startswith("broker")]
        + [p for p in procs if p["name"] == "autorecovery"]
        + [p for p in procs if p["name"].startswith("bookie")]
        + [p for p in procs if p["name"] == "zookeeper"]
    )
    _stop(order, timeout)
    (directory.resolve() / _STATE).unlink(missing_ok=True)


@command.command("status")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("cluster-data"),
    show_default=True,
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(directory: Path, as_json: bool) -> None:
    """Show the cluster's processes and whether each runs."""
    state = _load(directory)
    rows = [
        {"name": p["name"], "pid": p["pid"], "running": _alive(p["pid"]), "log": p["log"]} for p in state["processes"]
    ]
    if as_json:
        click.echo(
            json.dumps({"metadata_url": state.get("metadata_url"), "brokers": state["brokers"], "processes": rows})
        )
        return
    for r in rows:
        click.echo(f"{r['name']:<14} pid {r['pid']:<8} {'running' if r['running'] else 'stopped'}  {r['log']}")
