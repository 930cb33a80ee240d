"""The ``magnetar`` console script and its command group."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

import magnetar
from magnetar.cli import main


def test_version_command() -> None:
    result = CliRunner().invoke(main, ["version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"magnetar {magnetar.__version__}"


def test_help_lists_version_and_unknown_command_fails() -> None:
    runner = CliRunner()
    assert "version" in runner.invoke(main, ["--help"]).output
    result = runner.invoke(main, ["no-such-command"])
    assert result.exit_code != 0


def test_console_script_runs_as_module() -> None:
    out = subprocess.run([sys.executable, "-m", "magnetar", "version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("magnetar ")
