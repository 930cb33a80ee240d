"""The ``magnetar`` command line.

Sub-commands live in modules named ``cmd_<name>.py`` in this package, each exposing a click
command or group called ``command``. They are imported only when invoked, so ``magnetar version``
does not pay for importing trio, protobuf or Spark, and a broken optional dependency of one
sub-command never breaks the others.
"""

from __future__ import annotations

import importlib
import pkgutil

import click

from ._help import HELP_WIDTH, HelpGroup

__all__ = ["main"]


class _LazyGroup(HelpGroup):
    """A click group whose sub-commands are the ``cmd_*`` modules of this package."""

    def _discover(self) -> dict[str, str]:
        found = {}
        for info in pkgutil.iter_modules(__path__):
            if info.name.startswith("cmd_"):
                found[info.name[4:].replace("_", "-")] = f"{__name__}.{info.name}"
        return found

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._discover()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            return cmd
        module_name = self._discover().get(cmd_name)
        if module_name is None:
            return None
        module = importlib.import_module(module_name)
        return module.command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": HELP_WIDTH})
def main() -> None:
    """Magnetar: Pulsar-protocol messaging over replicated ledgers."""
