"""Run the official Go client's own tests (package ./pulsar of github.com/apache/pulsar-client-go)
against `magnetar standalone` configured as that client's CI configures its Pulsar.

What it does, in order:

1. ``go mod download`` the client module (latest release unless ``--version``) into the Go module
   cache and copy it to a writable directory under ``--cache`` (outside the repository; nothing
   downloaded is ever committed). The copy is made once per version.
2. Copy the client's ``integration-tests/conf/standalone.conf`` with its ``/pulsar/certs`` and
   ``/pulsar/tokens`` paths pointed at the module copy, plus ``basicAuthConf`` (Pulsar's CI passes
   the htpasswd file as a system property), and start ``magnetar standalone --conf`` with that
   file on the ports the tests hard-code (6650, 6651, 8080, 8443); the bookie takes free ports.
3. Apply the grants of the client's ``scripts/pulsar-test-service-start.sh`` through the admin
   REST API over https, authenticated by the client certificate of ``client.conf`` (role ``admin``,
   a super user).
4. ``go test -json`` the package with the exclusions of ``tests/go_client/exclusions.txt`` skipped
   (and, with ``--subset``, only the tests a subset of ``tests/go_client/subsets.txt`` names),
   then print each failing test, the counts and a closing ``N passed, N failed, N skipped`` line.
5. Stop standalone (SIGTERM, then SIGKILL) whatever happened.

Exit status: 0 when every test run passed (transaction tests are counted apart and do not count),
1 when one failed, 2 when the suite could not be run (no Go, module not served, standalone did not
start).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

MODULE = "github.com/apache/pulsar-client-go"
ROOT = Path(__file__).resolve().parent.parent
LISTS = ROOT / "tests" / "go_client"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "magnetar" / "go-client"
# The ports the client's tests hard-code (pulsar/helper_for_test.go).
TEST_PORTS = (6650, 6651, 8080, 8443)


class SuiteError(Exception):
    """The suite could not be run at all (exit status 2)."""


# ---------------------------------------------------------------------------------------------
# Lists: exclusions and subsets


@dataclasses.dataclass(frozen=True)
class Exclusion:
    """A test not run against Magnetar, and why (category: container, clusters or transactions)."""

    name: str
    category: str
    reason: str


def read_exclusions(path: Path) -> list[Exclusion]:
    """Lines ``TestName<TAB>category<TAB>reason``; ``#`` starts a comment."""
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [p.strip() for p in line.split("\t") if p.strip()]
        if len(parts) != 3 or parts[1] not in ("container", "clusters", "transactions"):
            raise SuiteError(f"{path}:{n}: expected 'TestName<TAB>container|clusters|transactions<TAB>reason'")
        out.append(Exclusion(*parts))
    return out


def read_subsets(path: Path) -> dict[str, list[str]]:
    """``[name]`` headers, then one test name (top-level, exact) per line; ``#`` comments."""
    subsets: dict[str, list[str]] = {}
    current: list[str] | None = None
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            current = subsets.setdefault(line[1:-1].strip(), [])
        elif current is None:
            raise SuiteError(f"{path}:{n}: a test name before any [subset] header")
        else:
            current.append(line.split()[0])
    return subsets


def anchored(names: list[str]) -> str:
    """A -run / -skip pattern matching exactly these top-level test names."""
    return "^(" + "|".join(re.escape(n) for n in names) + ")$"


# ---------------------------------------------------------------------------------------------
# The module


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GOFLAGS", "-buildvcs=false")
    # the tests' own testcontainers code is never reached (those tests are excluded); keep it quiet
    env.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    return env


def fetch_module(version: str, cache: Path) -> tuple[str, Path]:
    """Download the module through the Go module proxy; return (version, writable copy)."""
    if shutil.which("go") is None:
        raise SuiteError("the go command is not installed")
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{version}"],
        capture_output=True,
        text=True,
        env=go_env(),
        cwd=tempfile.gettempdir(),
    )
    try:
        info = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SuiteError(f"go mod download {MODULE}@{version} failed: {proc.stderr.strip()}") from None
    if proc.returncode != 0 or info.get("Error") or not info.get("Dir"):
        raise SuiteError(f"go mod download {MODULE}@{version} failed: {info.get('Error') or proc.stderr.strip()}")
    resolved = info["Version"]
    copy = cache / resolved / "src"
    if not (copy / ".copied").exists():
        shutil.rmtree(copy, ignore_errors=True)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(info["Dir"], copy)  # the module cache is read-only; go test writes beside the package
        for path in [copy, *copy.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
        (copy / ".copied").touch()
    return resolved, copy


# ---------------------------------------------------------------------------------------------
# Standalone


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ports_in_use() -> list[int]:
    busy = []
    for port in TEST_PORTS:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                busy.append(port)
    return busy


def write_conf(src: Path, run_dir: Path) -> Path:
    """The client CI's standalone.conf with its container paths pointed at the module copy, and the
    htpasswd file its Dockerfile passes as ``-Dpulsar.auth.basic.conf`` given as ``basicAuthConf``."""
    tests_dir = src / "integration-tests"
    text = (tests_dir / "conf" / "standalone.conf").read_text()
    for container_dir in ("certs", "tokens"):
        text = text.replace(f"/pulsar/{container_dir}/", f"{tests_dir / container_dir}/")
    text += "\n# added by scripts/go_client_tests.py (a system property in the client's CI)\n"
    text += f"basicAuthConf={tests_dir / 'conf' / '.htpasswd'}\n"
    out = run_dir / "standalone.conf"
    out.write_text(text)
    return out


def standalone_args(conf: Path, data_dir: Path) -> list[str]:
    """Arguments of ``magnetar standalone``: the client CI's conf file as it is (Magnetar reads
    Pulsar's properties files), the data directory, and free ports for the bookie, which Pulsar's
    standalone.conf does not configure."""
    return [
        "standalone",
        "--conf",
        str(conf),
        "--data-dir",
        str(data_dir),
        "--set",
        f"standalone.bookie_port={free_port()}",
        "--set",
        f"standalone.bookie_http_port={free_port()}",
    ]


def magnetar_exe() -> str:
    exe = Path(sys.executable).parent / "magnetar"
    return str(exe) if exe.exists() else "magnetar"


@contextlib.contextmanager
def standalone(conf: Path, run_dir: Path, start_timeout: float) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``magnetar standalone`` with ``conf``; yield once its admin REST answers; stop it on exit."""
    busy = ports_in_use()
    if busy:
        raise SuiteError(f"ports {busy} are in use: the Go client's tests need 6650, 6651, 8080 and 8443")
    log_path = run_dir / "standalone.log"
    cmd = [magnetar_exe(), *standalone_args(conf, run_dir / "data")]
    (run_dir / "standalone.cmd").write_text(" ".join(cmd) + "\n")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            if proc.poll() is not None:
                raise SuiteError(f"magnetar standalone exited with status {proc.returncode}; see {log_path}")
            try:
                with urllib.request.urlopen("http://localhost:8080/metrics", timeout=5):
                    break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise SuiteError(
                    f"magnetar standalone did not answer on :8080 within {start_timeout:.0f} s; see {log_path}"
                )
            time.sleep(0.5)
        yield proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------------------------------------
# Grants (scripts/pulsar-test-service-start.sh of the client)


def admin(src: Path, method: str, path: str, body: object) -> None:
    """One admin REST call over https, authenticated by client.conf's certificate (CN=admin)."""
    certs = src / "integration-tests" / "certs"
    ctx = ssl.create_default_context(cafile=str(certs / "cacert.pem"))
    ctx.load_cert_chain(str(certs / "client-cert.pem"), str(certs / "client-key.pem"))
    req = urllib.request.Request(
        f"https://localhost:8443{path}",
        method=method,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30):
            pass
    except urllib.error.HTTPError as exc:
        raise SuiteError(f"{method} {path}: {exc.code} {exc.read()[:300]!r}") from None


def apply_grants(src: Path) -> None:
    """As the client's CI: tenant ``public`` administered by ``anonymous``, produce+consume on
    ``public/default`` for ``anonymous``, tenant ``private`` with namespace ``private/auth`` where
    ``token-principal`` may produce and consume."""
    admin(src, "POST", "/admin/v2/tenants/public", {"adminRoles": ["anonymous"], "allowedClusters": ["standalone"]})
    admin(src, "POST", "/admin/v2/namespaces/public/default/permissions/anonymous", ["produce", "consume"])
    admin(src, "PUT", "/admin/v2/tenants/private", {"adminRoles": [], "allowedClusters": ["standalone"]})
    admin(src, "PUT", "/admin/v2/namespaces/private/auth", {})
    admin(src, "POST", "/admin/v2/namespaces/private/auth/permissions/token-principal", ["produce", "consume"])


# ---------------------------------------------------------------------------------------------
# go test -json


@dataclasses.dataclass
class Outcome:
    """What one top-level test ended as, and how long it took."""

    name: str
    action: str = "run"  # pass, fail, skip; crash (the test binary died in it); run (never started)
    elapsed: float = 0.0
    output: list[str] = dataclasses.field(default_factory=list)


def list_tests(src: Path) -> list[str]:
    """The package's top-level test names, in the order go test runs them."""
    proc = subprocess.run(
        ["go", "test", "-list", ".", "./pulsar"], cwd=src, env=go_env(), capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SuiteError(f"go test -list failed (does the package build?): {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return [line for line in proc.stdout.splitlines() if line.startswith("Test")]


def run_go_test(src: Path, selected: list[str], timeout: str, json_path: Path, verbose: bool) -> dict[str, Outcome]:
    """``go test -json`` on ./pulsar for the ``selected`` top-level tests; return each one's outcome.

    A test that panics ends the whole test binary; the selected tests that had not run then run in
    another ``go test``, until every one has ended or a round makes no progress (a test that was
    running when the binary died counts as failed; one never started stays ``run``)."""
    outcomes: dict[str, Outcome] = {name: Outcome(name) for name in selected}
    with open(json_path, "w") as raw:
        while True:
            remaining = [n for n in selected if outcomes[n].action == "run"]
            if not remaining:
                break
            cmd = ["go", "test", "-json", "-count=1", f"-timeout={timeout}", f"-run={anchored(remaining)}", "./pulsar"]
            proc = subprocess.Popen(
                cmd, cwd=src, env=go_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            assert proc.stdout is not None
            started = []
            for line in proc.stdout:
                raw.write(line)
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    continue  # build errors and the like arrive as plain text
                test = ev.get("Test")
                if not test:
                    continue
                top = test.split("/", 1)[0]
                o = outcomes.setdefault(top, Outcome(top))
                action = ev.get("Action")
                if test == top and action == "run":
                    started.append(top)
                if action == "output" and len(o.output) < 400:
                    o.output.append(ev.get("Output", ""))
                if test == top and action in ("pass", "fail", "skip"):
                    o.action, o.elapsed = action, float(ev.get("Elapsed", 0.0))
                    if verbose:
                        print(f"  {action:4} {top} ({o.elapsed:.1f} s)", flush=True)
            proc.wait()
            if not started:
                if proc.returncode != 0:
                    raise SuiteError(f"go test exited with status {proc.returncode} and ran no test; see {json_path}")
                break
            # the binary died (a panic, or the -timeout) inside these tests: they count as failed
            for name in (n for n in started if outcomes[n].action == "run"):
                outcomes[name].action = "crash"
                if verbose:
                    print(f"  fail {name} (ended the test binary: see failures.txt)", flush=True)
            if proc.returncode == 0 or any("panic: test timed out" in "".join(outcomes[n].output) for n in started):
                break
    return outcomes


def summarize(outcomes: dict[str, Outcome], exclusions: list[Exclusion], run_dir: Path) -> int:
    """Print failures and counts; return the number of failed tests outside the transaction tests."""
    txn = {e.name for e in exclusions if e.category == "transactions"}
    main = {n: o for n, o in outcomes.items() if n not in txn}
    txn_run = {n: o for n, o in outcomes.items() if n in txn}
    counts = {k: sum(1 for o in main.values() if o.action == k) for k in ("pass", "fail", "skip", "crash", "run")}
    failed = sorted(n for n, o in main.items() if o.action in ("fail", "crash", "run"))
    with open(run_dir / "failures.txt", "w") as out:
        for name in failed:
            out.write(f"===== {name} ({main[name].action})\n{''.join(main[name].output)}\n")
    if failed:
        print("failing tests:")
        for name in failed:
            note = {"fail": "", "crash": " (the test binary died in it)", "run": " (never ran)"}[main[name].action]
            print(f"  {name}{note}")
    slow = sorted(main.values(), key=lambda o: -o.elapsed)[:10]
    if slow:
        print("slowest: " + ", ".join(f"{o.name} {o.elapsed:.0f} s" for o in slow))
    excluded = [e for e in exclusions if e.category != "transactions"]
    print(f"excluded (own Pulsar container or several clusters): {len(excluded)}")
    if txn_run:
        tp = sum(1 for o in txn_run.values() if o.action == "pass")
        print(f"transaction tests (counted apart): {tp} passed, {len(txn_run) - tp} failed")
    else:
        print(f"transaction tests (counted apart): {len(txn)} not run")
    n_failed = counts["fail"] + counts["crash"] + counts["run"]
    print(f"go-client: {counts['pass']} passed, {n_failed} failed, {counts['skip']} skipped")
    return len(failed)


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--version", default="latest", help="module version (default: the latest release)")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"where the module copy lives ({DEFAULT_CACHE})")
    p.add_argument("--subset", help="run only the tests of this subset of tests/go_client/subsets.txt")
    p.add_argument("--run", help="run only tests matching this go test -run pattern")
    p.add_argument("--transactions", action="store_true", help="also run the transaction tests (counted apart)")
    p.add_argument("--timeout", default="60m", help="go test -timeout (default 60m)")
    p.add_argument("--start-timeout", type=float, default=180.0, help="seconds for standalone to come up")
    p.add_argument("--run-dir", type=Path, help="keep logs here (default: a new temporary directory)")
    p.add_argument(
        "--no-standalone",
        action="store_true",
        help="use a Magnetar already serving the test ports (with the grants applied)",
    )
    p.add_argument(
        "--prepare",
        action="store_true",
        help="only fetch the module and build its tests (Go's build cache), run nothing",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="print each test as it ends")
    args = p.parse_args(argv)
    try:
        exclusions = read_exclusions(LISTS / "exclusions.txt")
        skip = {e.name for e in exclusions if not args.transactions or e.category != "transactions"}
        version, src = fetch_module(args.version, args.cache)
        known = list_tests(src)
        if args.prepare:
            print(f"{MODULE}@{version}: {len(known)} tests built in {src / 'pulsar'}", flush=True)
            return 0
        run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="go-client-tests-"))
        run_dir.mkdir(parents=True, exist_ok=True)
        print(f"{MODULE}@{version}: tests in {src / 'pulsar'}; logs in {run_dir}", flush=True)
        stale = [e.name for e in exclusions if e.name not in known]
        if stale:
            print(f"warning: exclusions.txt names tests this version does not have: {', '.join(stale)}")
        selected = [n for n in known if n not in skip]
        if args.subset:
            subsets = read_subsets(LISTS / "subsets.txt")
            if args.subset not in subsets:
                raise SuiteError(f"no subset {args.subset!r} in tests/go_client/subsets.txt ({', '.join(subsets)})")
            missing = [n for n in subsets[args.subset] if n not in known]
            if missing:
                print(f"warning: subset {args.subset} names tests this version does not have: {', '.join(missing)}")
            selected = [n for n in selected if n in subsets[args.subset]]
        if args.run:
            pattern = re.compile(args.run)  # Go's RE2 and Python agree on the patterns used here
            selected = [n for n in selected if pattern.search(n)]
        if not selected:
            raise SuiteError("no test selected")
        started = time.monotonic()
        with contextlib.ExitStack() as stack:
            if not args.no_standalone:
                stack.enter_context(standalone(write_conf(src, run_dir), run_dir, args.start_timeout))
                apply_grants(src)
                print(f"standalone up and granted in {time.monotonic() - started:.0f} s", flush=True)
            outcomes = run_go_test(src, selected, args.timeout, run_dir / "go-test.json", args.verbose)
        print(f"go test ran {time.monotonic() - started:.0f} s", flush=True)
        failed = summarize(outcomes, exclusions, run_dir)
        return 1 if failed else 0
    except SuiteError as exc:
        print(f"go-client-tests: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
