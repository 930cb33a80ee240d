"""`HelpGroup`: the click group every ``magnetar`` group is, so that ``--help`` lists each
sub-command with its whole summary (click cuts summaries to the width left by the longest command
name, "Acknowledge a..."), wrapped at `HELP_WIDTH`, and so that a group can answer to other
spellings of a command (pulsar-admin's) without listing them twice.
"""

from __future__ import annotations

import inspect
import re

import click

__all__ = ["HELP_WIDTH", "HelpGroup", "summary"]

HELP_WIDTH = 100
"""The widest help text (click's default is 80), as wide as the other human output."""

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(`])")


def summary(cmd: click.Command) -> str:
    """A command's one-line summary: its ``short_help``, else the first sentence of its help,
    whole; '' when it has neither."""
    if cmd.short_help:
        return inspect.cleandoc(cmd.short_help)
    if not cmd.help:
        return ""
    first = inspect.cleandoc(cmd.help).split("\n\n", 1)[0]
    first = " ".join(first.replace("\b", "").split())
    return _SENTENCE_END.split(first, maxsplit=1)[0]


class HelpGroup(click.Group):
    """A group whose help lists every visible sub-command with its whole `summary` (wrapped, never
    cut), and whose ``aliases`` (other name -> command name) resolve to commands without being
    listed. Groups made with its ``group()`` decorator are HelpGroups too."""

    group_class: type[click.Group] | type[type] | None = type

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.aliases: dict[str, str] = {}

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command named ``cmd_name`` or aliased by it."""
        cmd = super().get_command(ctx, cmd_name)
        if cmd is None and cmd_name in self.aliases:
            cmd = super().get_command(ctx, self.aliases[cmd_name])
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The "Commands" section: each visible command and its whole summary."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, summary(cmd)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
