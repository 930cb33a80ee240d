"""Every ``magnetar ... --help`` lists each sub-command with its whole summary (no "..."), in at
most 100 columns, and every command's own ``--help`` works: the whole command tree is walked,
the lazily loaded modules and the admin commands registered by other modules included."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from magnetar.cli import main
from magnetar.cli._help import HELP_WIDTH, HelpGroup, summary


def _walk(
    group: click.Group, path: tuple[str, ...], parent: click.Context | None = None
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group, info_name=path[-1] if path else "magnetar", parent=parent)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, (*path, name)
        yield (*path, name), cmd
        if isinstance(cmd, click.Group):
            yield from _walk(cmd, (*path, name), ctx)


COMMANDS = list(_walk(main, ()))
GROUPS = [((), main), *[(path, cmd) for path, cmd in COMMANDS if isinstance(cmd, click.Group)]]


def _help(path: tuple[str, ...]) -> str:
    # a wide terminal: help stops at HELP_WIDTH columns anyway
    result = CliRunner().invoke(main, [*path, "--help"], prog_name="magnetar", env={"COLUMNS": "200"})
    assert result.exit_code == 0, (path, result.output)
    return result.output


def test_the_walk_sees_every_part_of_the_cli() -> None:
    paths = {" ".join(p) for p, _ in COMMANDS}
    assert {
        "admin topics explain-storage",
        "admin namespaces set-message-ttl",
        "admin broker-stats topics",
        "perf produce",
        "bookie shell listbookies",
        "tokens create",
    } <= paths
    assert len(COMMANDS) > 180


@pytest.mark.parametrize("path, group", GROUPS, ids=[" ".join(p) or "magnetar" for p, _ in GROUPS])
def test_group_help_lists_whole_summaries(path: tuple[str, ...], group: click.Group) -> None:
    assert isinstance(group, HelpGroup), f"{' '.join(path)} is a plain click group (its summaries get cut)"
    text = _help(path)
    assert max(len(line) for line in text.splitlines()) <= HELP_WIDTH, text
    commands = text.split("Commands:", 1)[1]
    flat = " ".join(commands.split())
    assert "..." not in flat, text
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        if cmd.hidden:
            continue
        line = summary(cmd)
        assert line, f"{' '.join((*path, name))} has no summary"
        assert f"{name} {line}" in flat, f"{name}: {line!r} not whole in:\n{text}"


@pytest.mark.parametrize(
    "path",
    [p for p, c in COMMANDS if not isinstance(c, click.Group)],
    ids=[" ".join(p) for p, c in COMMANDS if not isinstance(c, click.Group)],
)
def test_every_command_has_help(path: tuple[str, ...]) -> None:
    text = _help(path)
    assert f"Usage: magnetar {' '.join(path)}" in text


def test_summary_is_the_first_sentence_whole() -> None:
    cmd = click.Command(
        "x",
        help="Show the max unacked messages per consumer of a namespace (e.g. 10). More text.\n\nA second paragraph.",
    )
    assert summary(cmd) == "Show the max unacked messages per consumer of a namespace (e.g. 10)."
    wrapped = click.Command("y", help="One line\nwrapped in the docstring.")
    assert summary(wrapped) == "One line wrapped in the docstring."
    assert summary(click.Command("z", short_help="Short.", help="Long. Longer.")) == "Short."
