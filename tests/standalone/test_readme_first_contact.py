"""The README's set-up and first-contact sections followed literally on a fresh clone of this tree:
``scripts/standalone`` (which installs into the clone's own ``./.venv``), ``pip install
pulsar-client``, the example saved as ``hello.py`` and run, the admin commands and the metrics URLs,
then a second start of ``scripts/standalone`` that installs nothing.

The only changes to what a newcomer types are the ports: the defaults may be taken on a shared
machine, so standalone gets free ones (``scripts/standalone`` passes extra arguments on) and the
example, ``MAGNETAR_ADMIN_URL`` and the URLs are pointed at them."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.support.ports import free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
READY = re.compile(r"bookie \S+: protocol \S+, http (http://\S+)\s+broker: (pulsar://\S+)\s+admin REST: (http://\S+)")
WIDTH = 100  # the terminal a person reads human output in


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end]


def _commands(section: str) -> list[str]:
    """The indented command lines of a README section, comments dropped."""
    return [
        line.split("#")[0].strip()
        for line in section.splitlines()
        if line.startswith("    ") and line.strip() and not line.strip().startswith("#")
    ]


def _fresh_clone(dest: Path) -> None:
    """The tracked files of this tree as they are on disk (what a clone of them would hold)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


class _Standalone:
    """``scripts/standalone`` of the clone, on free ports, its output in a file."""

    def __init__(self, clone: Path, bookie_port: int, log: Path) -> None:
        self.log_path = log
        ports = [
            "--set",
            f"standalone.bookie_port={bookie_port}",
            "--set",
            "standalone.bookie_http_port=0",
            "--set",
            "broker.broker_service_port=0",
            "--set",
            "broker.web_service_port=0",
        ]
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                ["scripts/standalone", *ports],
                cwd=clone,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def wait_ready(self, timeout: float) -> tuple[str, str, str]:
        """(bookie http URL, broker service URL, admin URL) once standalone is ready."""

        def ready() -> re.Match[str] | None:
            assert self.proc.poll() is None, f"scripts/standalone exited:\n{self.output()}"
            return READY.search(self.output())

        match = wait_until(ready, "scripts/standalone to be ready", timeout_s=timeout, interval_s=0.2)
        return match.group(1), match.group(2), match.group(3)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        """Ctrl-C as a person stops it (SIGINT to its process group)."""
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
            raise


def _run(argv: list[str], clone: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    run = subprocess.run(argv, cwd=clone, capture_output=True, text=True, timeout=timeout, env=env)
    assert run.returncode == 0, f"{' '.join(argv)}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run


def _assert_readable(command: str, out: str) -> None:
    """Human output: lines that fit the terminal, no Python reprs, no raw epoch times."""
    for line in out.splitlines():
        assert len(line) <= WIDTH, f"{command}: {len(line)} columns: {line}"
    assert not re.search(r"\{'|\[\]|\bNone\b|\bTrue\b|\bFalse\b", out), f"{command}:\n{out}"
    assert not re.search(r"\b1[5-9]\d{11}\b", out), f"{command} prints a time in ms:\n{out}"


@pytest.mark.timeout(1200)
def test_readme_set_up_and_first_contact_on_a_fresh_clone(tmp_path: Path) -> None:
    setup, first = _section("Set-up on a fresh machine"), _section("First contact")
    assert _commands(setup) == ["scripts/standalone", "scripts/test"]  # the README's two set-up commands
    steps = _commands(first)
    assert steps[0] == ".venv/bin/pip install pulsar-client"
    admin = [s for s in steps if s.startswith(".venv/bin/magnetar admin")]
    assert len(admin) == 3 and steps == [steps[0], *admin]
    snippet = re.search(r"Save this as `hello.py`:\n\n```python\n(.*?)```", first, re.S)
    assert snippet, "the example is missing from the first-contact section"
    urls = re.findall(r"`curl (localhost:\d+/metrics)`", first)
    assert urls == ["localhost:8080/metrics", "localhost:8000/metrics"]

    clone = tmp_path / "clone"
    _fresh_clone(clone)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    bookie_port = free_port()
    sa = _Standalone(clone, bookie_port, tmp_path / "first.log")
    try:
        bookie_http, service_url, admin_url = sa.wait_ready(timeout=900)  # the first start installs
        assert (clone / ".venv/bin/magnetar").exists()

        _run(steps[0].split(), clone, env, timeout=600)
        code = snippet.group(1).replace("pulsar://localhost:6650", service_url)
        assert code != snippet.group(1), "the example no longer connects to pulsar://localhost:6650"
        (clone / "hello.py").write_text(code)
        hello = _run([".venv/bin/python", "hello.py"], clone, env)
        assert hello.stdout == "received: hello\n"  # what it received, and only that
        assert hello.stderr == "", hello.stderr  # the client kept quiet

        admin_env = {**env, "MAGNETAR_ADMIN_URL": admin_url}
        outputs = {command: _run(command.split(), clone, admin_env).stdout for command in admin}
        stats_table, explain, stats_json = outputs.values()
        for command, out in outputs.items():
            if "--json" not in command:
                _assert_readable(command, out)
        stats = json.loads(stats_json)
        sub = stats["subscriptions"]["my-sub"]
        assert (stats["msgInCounter"], stats["msgOutCounter"], sub["msgOutCounter"]) == (1, 1, 1)
        assert stats["bytesOutCounter"] == stats["bytesInCounter"] > 0 and sub["msgBacklog"] == 0
        assert re.search(r"^msgInCounter +1$", stats_table, re.M), stats_table
        assert re.search(r"^msgOutCounter +1$", stats_table, re.M), stats_table
        assert re.search(r"^my-sub +Exclusive +0 +0 B +0 +1 ", stats_table, re.M), stats_table
        assert re.search(r"^\d+ +1 +\d+ B +[\dmhs. ]+\(open\) +keep ", explain, re.M), explain  # with its age

        broker_metrics = httpx.get(urls[0].replace("localhost:8080", admin_url), timeout=30).text
        bookie_metrics = httpx.get(urls[1].replace("localhost:8000", bookie_http), timeout=30).text
        assert "pulsar_in_messages_total{" in broker_metrics
        for text in (broker_metrics, bookie_metrics):
            assert not re.search(r"^\w+_created\b", text, re.M), "epoch-valued *_created series"
    finally:
        assert sa.stop() == 0, sa.output()

    # Started again as the README says: no reinstall, and the data is still there.
    again = _Standalone(clone, bookie_port, tmp_path / "again.log")
    try:
        _, _, admin_url = again.wait_ready(timeout=120)
        assert "installing" not in again.output() and "pip" not in again.output(), again.output()
        topics = _run(
            [".venv/bin/magnetar", "admin", "--json", "topics", "list", "public/default"],
            clone,
            {**env, "MAGNETAR_ADMIN_URL": admin_url},
        ).stdout
        assert "persistent://public/default/my-topic" in topics
    finally:
        assert again.stop() == 0, again.output()
