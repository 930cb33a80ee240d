"""The README's first-contact walk-through, run as written against a real standalone: the client
snippet (with standalone's port), then the admin commands it lists, then the metrics URLs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.standalone import start_standalone

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end]


def test_readme_first_contact_works_as_written(tmp_path: Path) -> None:
    first = _section("First contact")
    assert "pip install pulsar-client" in first
    snippet = re.search(r"```python\n(.*?)```", _section("Using it"), re.S)
    assert snippet, "the client snippet is missing"
    commands = [line.strip() for line in first.splitlines() if line.strip().startswith(".venv/bin/magnetar admin")]
    assert len(commands) >= 2

    sa = start_standalone(tmp_path / "data")
    try:
        code = snippet.group(1).replace("pulsar://localhost:6650", sa.service_url)
        assert code != snippet.group(1), "the snippet no longer connects to pulsar://localhost:6650"
        script = tmp_path / "hello.py"
        script.write_text(code)
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-3000:]
        outputs = []
        for command in commands:
            argv = command.split("#")[0].split()[1:]  # drop ".venv/bin/magnetar" and the comment
            argv = [argv[0], "--admin-url", sa.admin_url, *argv[1:]]
            result = subprocess.run([sys.executable, "-m", "magnetar", *argv], capture_output=True, text=True,
                                    timeout=60)
            assert result.returncode == 0, f"{command}: {result.stderr}"
            outputs.append(result.stdout)
        assert any("my-sub" in out for out in outputs)  # stats show the subscription
        assert any("open_ledger" in out for out in outputs)  # explain-storage explains the ledger
        assert any('"msgInCounter": 1' in out for out in outputs)  # --json: one message published
        assert "pulsar_in_messages_total" in httpx.get(f"{sa.admin_url}/metrics", timeout=10).text
    finally:
        assert sa.stop() == 0, sa.log()
