"""Run the Java client suite (tests/java, JUnit 5 with Maven) against a fresh `magnetar standalone`.

Started by scripts/java-client-tests. It makes a test CA and certificates (trustme), an HS256
secret and tokens for three roles, starts standalone on free loopback ports with its plain and TLS
ports, token authentication and authorization on (super user ``admin``), resolves pulsar-perf's
class path once (tests/java/pulsar-perf), runs ``mvn test`` with the URLs and credentials in
``MAGNETAR_*`` environment variables (tests/java/src/test/java/.../Env.java reads them), then
stops standalone with SIGTERM. Its exit status is Maven's; standalone's log is kept in
tests/java/target/magnetar-standalone.log.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from broker.auth import create_token, new_secret_key  # noqa: E402
from tests.support.certs import make_certs  # noqa: E402

PLAIN = re.compile(r"broker: (pulsar://\S+)\s+admin REST: (http://\S+)")
TLS = re.compile(r"broker TLS: (pulsar\+ssl://\S+)\s+admin REST TLS: (https://\S+)")
PERF_POM = HERE / "pulsar-perf" / "pom.xml"
SETTINGS = HERE / "settings.xml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _mvn(*args: str) -> list[str]:
    return ["mvn", "-B", "-ntp", "-s", str(SETTINGS), *args]


def perf_classpath(target: Path) -> str:
    """pulsar-perf's class path (pulsar-testclient from Maven Central), resolved once per change
    of its pom; an empty string when Maven cannot resolve it (the test then fails, saying so)."""
    out = target / "pulsar-perf.classpath"
    if out.exists() and out.stat().st_mtime > PERF_POM.stat().st_mtime and out.read_text().strip():
        return out.read_text().strip()
    target.mkdir(parents=True, exist_ok=True)
    log = target / "pulsar-perf-resolve.log"
    with open(log, "w") as f:
        rc = subprocess.call(
            _mvn("-q", "-f", str(PERF_POM), "dependency:build-classpath", f"-Dmdep.outputFile={out}"),
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    if rc != 0:
        print(f"could not resolve pulsar-perf (see {log})", file=sys.stderr)
        return ""
    return out.read_text().strip()


class Standalone:
    """`magnetar standalone` in its own process group, its log in a file."""

    def __init__(self, work: Path, log_path: Path, extra: list[str]) -> None:
        self.log_path = log_path
        data = work / "data"
        certs = make_certs(work / "certs")
        self.ca = certs.ca
        key = work / "token-secret.key"
        secret = new_secret_key()
        key.write_bytes(secret)
        other = new_secret_key()
        self.tokens = {
            "admin": create_token("admin", secret_key=secret),
            "user": create_token("app-user", secret_key=secret),
            # well-formed, but signed with a key the broker does not know
            "forged": create_token("admin", secret_key=other),
        }
        sets = {
            "standalone.bookie_port": _free_port(),
            "standalone.bookie_http_port": 0,
            "broker.broker_service_port": 0,
            "broker.web_service_port": 0,
            "broker.broker_service_port_tls": 0,
            "broker.web_service_port_tls": 0,
            "broker.tlsCertificateFilePath": certs.server_cert,
            "broker.tlsKeyFilePath": certs.server_key,
            "broker.authenticationEnabled": "true",
            "broker.authenticationProviders": "token",
            "broker.tokenSecretKey": f"file://{key}",
            "broker.authorizationEnabled": "true",
            "broker.superUserRoles": "admin",
            # rates and msgChunkPublished are taken once per stats period (60 s by default, in
            # Pulsar too): a short one lets tests see them without waiting a minute
            "broker.statsUpdateFrequencyInSecs": 1,
            "broker.statsUpdateInitialDelayInSecs": 1,
            # TransactionsTest: the coordinator (and the topic side) on, as a transactional client needs
            "broker.transactionCoordinatorEnabled": "true",
        }
        cmd = [sys.executable, "-m", "magnetar", "standalone", "--data-dir", str(data)]
        for k, v in sets.items():
            cmd += ["--set", f"{k}={v}"]
        cmd += extra
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def wait_ready(self, timeout: float = 120.0) -> dict[str, str]:
        """The URLs standalone printed once ready; raises if it exits or takes too long."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            plain, tls = PLAIN.search(text), TLS.search(text)
            if plain and tls and "ready" in text:
                return {
                    "MAGNETAR_SERVICE_URL": plain.group(1),
                    "MAGNETAR_HTTP_URL": plain.group(2),
                    "MAGNETAR_SERVICE_URL_TLS": tls.group(1),
                    "MAGNETAR_HTTP_URL_TLS": tls.group(2),
                }
            if self.proc.poll() is not None:
                raise RuntimeError(f"standalone exited with {self.proc.returncode}; see {self.log_path}")
            time.sleep(0.2)
        raise RuntimeError(f"standalone was not ready after {timeout:.0f} s; see {self.log_path}")

    def stop(self) -> int:
        """SIGTERM to the group, SIGKILL after 60 s; the exit status."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--set", action="append", default=[], metavar="TABLE.KEY=VALUE", help="extra standalone config override"
    )
    parser.add_argument(
        "--prepare",
        action="store_true",
        help="only compile the suite and resolve pulsar-perf's class path (downloads "
        "included), so that a later run starts at once",
    )
    args, mvn_args = parser.parse_known_args()  # the rest go to Maven, e.g. -Dtest='SchemaTest'

    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed", file=sys.stderr)
            return 4
    target = HERE / "target"
    target.mkdir(exist_ok=True)
    # build first: a compile error should not wait for standalone
    if subprocess.call(_mvn("-q", "-f", str(HERE / "pom.xml"), "test-compile")) != 0:
        return 1
    perf_cp = perf_classpath(target)
    if args.prepare:
        return 0
    work = Path(tempfile.mkdtemp(prefix="magnetar-java-"))
    extra = [a for s in args.set for a in ("--set", s)]
    standalone = Standalone(work, target / "magnetar-standalone.log", extra)
    rc = 1
    try:
        env = {
            **os.environ,
            **standalone.wait_ready(),
            "MAGNETAR_TLS_TRUST_CERTS": standalone.ca,
            "MAGNETAR_ADMIN_TOKEN": standalone.tokens["admin"],
            "MAGNETAR_USER_TOKEN": standalone.tokens["user"],
            "MAGNETAR_USER_ROLE": "app-user",
            "MAGNETAR_FORGED_TOKEN": standalone.tokens["forged"],
            "MAGNETAR_PERF_CLASSPATH": perf_cp,
            "MAGNETAR_WORK_DIR": str(work),
        }
        started = time.monotonic()
        rc = subprocess.call(_mvn("-f", str(HERE / "pom.xml"), "surefire:test", *mvn_args), env=env)
        print(f"java client suite: mvn exited {rc} after {time.monotonic() - started:.0f} s")
    finally:
        status = standalone.stop()
        if status not in (0, -signal.SIGTERM):
            print(f"standalone exited with {status}; see {standalone.log_path}", file=sys.stderr)
            rc = rc or 1
        shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
