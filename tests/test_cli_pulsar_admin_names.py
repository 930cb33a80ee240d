"""``magnetar admin`` accepts pulsar-admin's spellings: every option pulsar-admin 4.0 documents for
a command Magnetar implements (``pulsar_admin_4_0_options.json``, names only) is a name of one of
that command's options, taking a value exactly when pulsar-admin's does, and all the names of one
pulsar-admin option reach the same Magnetar option; pulsar-admin's command names resolve too."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from magnetar.cli import main

DATA = json.loads((Path(__file__).parent / "pulsar_admin_4_0_options.json").read_text())
CASES = [(group, name, opts) for group, cmds in sorted(DATA["commands"].items()) for name, opts in sorted(cmds.items())]


def _admin() -> tuple[click.Group, click.Context]:
    root = click.Context(main, info_name="magnetar")
    admin = main.get_command(root, "admin")
    assert isinstance(admin, click.Group)
    ctx = click.Context(admin, info_name="admin", parent=root)
    admin.list_commands(ctx)  # registers every command and pulsar-admin's names
    return admin, ctx


@pytest.mark.parametrize("group, name, options", CASES, ids=[f"{g} {n}" for g, n, _ in CASES])
def test_every_pulsar_admin_option_is_accepted(group: str, name: str, options: list[dict]) -> None:
    admin, ctx = _admin()
    grp = admin.get_command(ctx, group)
    assert isinstance(grp, click.Group)
    cmd = grp.get_command(click.Context(grp, parent=ctx), name)
    assert cmd is not None, f"magnetar admin {group} {name}: no such command"
    by_name = {n: p for p in cmd.params if isinstance(p, click.Option) for n in (*p.opts, *p.secondary_opts)}
    for option in options:
        # pulsar-admin names one option of `topics delete` "regex", without dashes: no option name here
        names = [n for n in option["names"] if n.startswith("-")]
        missing = [n for n in names if n not in by_name]
        assert not missing, f"magnetar admin {group} {name} refuses pulsar-admin's {missing}"
        params = {id(by_name[n]) for n in names}
        assert len(params) == 1, f"{group} {name}: {names} reach different options"
        param = by_name[names[0]]
        assert param.is_flag == option.get("flag", False), f"{group} {name} {names}: flag or value differs"


def _run(*args: str) -> click.testing.Result:
    return CliRunner().invoke(main, ["admin", "--admin-url", "http://127.0.0.1:9", *args])


def test_an_unsupported_pulsar_admin_option_is_refused_with_the_reason() -> None:
    result = _run("namespaces", "set-offload-policies", "public/default", "-d", "aws-s3", "--s3-role", "r")
    assert result.exit_code == 2
    assert "pulsar-admin's --s3-role is not supported by Magnetar: S3 credentials are an access key" in result.output
    assert "No such option" not in _run("topics", "delete", "t", "--from-file").output


def test_pulsar_admin_names_show_in_help() -> None:
    out = CliRunner().invoke(main, ["admin", "namespaces", "set-message-ttl", "--help"]).output
    assert "--messageTTL" in out and "-ttl" in out
    out = CliRunner().invoke(main, ["admin", "topics", "stats", "--help"]).output
    assert "-etb, --get-earliest-time-in-backlog" in out
    out = CliRunner().invoke(main, ["admin", "namespaces", "set-offload-policies", "--help"]).output
    assert "--s3-role" not in out and "-mbs, --maxBlockSize" in out
