"""StreamNative's ``pulsar-spark`` connector in a Java Spark job, built and run for tests and benchmarks.

The job (``tests/pulsar_spark/src/main/java/magnetar/pulsarspark/PulsarSparkJob.java``) is compiled
with Maven against the connector and Spark from Maven Central (``tests/pulsar_spark/pom.xml`` names
the versions); the jars stay in Maven's local repository (``~/.m2``) and the class path and classes
in ``tests/pulsar_spark/target/``, never in the repository. `prepare` does both once per change of
the pom or the job's source, so that CI can run it in the background
(``python -m tests.support.pulsar_spark_job --prepare``) and a test starts at once. `run_job`
runs one mode of the job in local mode and returns what it printed.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "pulsar_spark"  # the job's Maven module
POM = HERE / "pom.xml"
SOURCE = HERE / "src" / "main" / "java" / "magnetar" / "pulsarspark" / "PulsarSparkJob.java"
TARGET = HERE / "target"
CLASSPATH = TARGET / "classpath.txt"
SETTINGS = ROOT / "tests" / "java" / "settings.xml"
MAIN = "magnetar.pulsarspark.PulsarSparkJob"

# Spark 3.4 on Java 17 opens these JDK internals itself when started by spark-submit; the job runs
# on a plain `java`, so it opens them here.
OPENS = [
    f"--add-opens=java.base/{p}=ALL-UNNAMED"
    for p in (
        "java.lang",
        "java.lang.invoke",
        "java.lang.reflect",
        "java.io",
        "java.net",
        "java.nio",
        "java.util",
        "java.util.concurrent",
        "java.util.concurrent.atomic",
        "sun.nio.ch",
        "sun.nio.cs",
        "sun.security.action",
        "sun.util.calendar",
    )
]
RESULT = re.compile(r"^RESULT mode=(\w+) run=(\d+) rows=(\d+) seconds=([\d.]+)$", re.M)


class JobUnavailable(RuntimeError):
    """Java or Maven is missing (the message says which)."""


@dataclass(frozen=True)
class RunResult:
    """One query of the job: its mode, run index, rows read and wall time (query start to end)."""

    mode: str
    run: int
    rows: int
    seconds: float


def _fresh() -> bool:
    if not (CLASSPATH.exists() and (TARGET / "classes").is_dir() and CLASSPATH.read_text().strip()):
        return False
    built = CLASSPATH.stat().st_mtime
    return built > POM.stat().st_mtime and built > SOURCE.stat().st_mtime


def prepare() -> str:
    """Build the job and resolve its class path (downloads included) unless done for this pom and
    source already; returns the class path to run it with. Raises `JobUnavailable` without Java or
    Maven, RuntimeError when Maven fails."""
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            raise JobUnavailable(f"{tool} is not installed")
    if not _fresh():
        TARGET.mkdir(exist_ok=True)
        log = TARGET / "prepare.log"
        cmd = [
            "mvn",
            "-B",
            "-ntp",
            "-q",
            "-s",
            str(SETTINGS),
            "-f",
            str(POM),
            "compile",
            "dependency:build-classpath",
            f"-Dmdep.outputFile={CLASSPATH}",
        ]
        with open(log, "w") as f:
            rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
        if rc != 0 or not CLASSPATH.exists():
            raise RuntimeError(f"Maven could not build the pulsar-spark job (see {log})")
    return f"{TARGET / 'classes'}:{CLASSPATH.read_text().strip()}"


def run_job(mode: str, log: Path, *, timeout: float = 600.0, **args: str | int) -> list[RunResult]:
    """Run the job's ``mode`` (``copy``, ``read`` or ``write``) with ``--key value`` arguments
    (``service_url`` becomes ``--service-url``, ``in_`` ``--in``), its output in ``log``; returns its RESULT lines.
    Raises RuntimeError, with the log's tail, when the job fails or prints none."""
    classpath = prepare()
    cmd = ["java", "-Xmx1g", *OPENS, "-cp", classpath, MAIN, "--mode", mode]
    for key, value in args.items():
        cmd += [f"--{key.rstrip('_').replace('_', '-')}", str(value)]
    with open(log, "w") as f:
        try:
            rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = -1
    text = log.read_text(errors="replace")
    results = [RunResult(m, int(r), int(n), float(s)) for m, r, n, s in RESULT.findall(text)]
    if rc != 0 or not results:
        lines = [line for line in text.splitlines() if not line.lstrip().startswith("at ")]
        tail = "\n".join(lines[-40:])
        raise RuntimeError(f"the pulsar-spark job ({mode}) exited with {rc} (log {log}):\n{tail}")
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prepare", action="store_true", help="only build the job and resolve its class path")
    args = parser.parse_args()
    if args.prepare:
        try:
            prepare()
        except (JobUnavailable, RuntimeError) as exc:
            print(exc, file=sys.stderr)
            return 1
        print(f"pulsar-spark job ready: {CLASSPATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
