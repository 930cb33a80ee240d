"""``magnetar version``: print the installed version."""

import click

import magnetar


@click.command(name="version")
def command() -> None:
    """Print Magnetar's version."""
    click.echo(f"magnetar {magnetar.__version__}")
