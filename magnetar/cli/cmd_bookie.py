"""``magnetar bookie``: run a bookie; ``magnetar bookie format``: initialise its directories;
``magnetar bookie gc-explain``: ask a running bookie why its entry logs are still on disk.

Configuration comes from ``--conf bookie.toml`` (top-level keys, or a ``[bookie]`` table) or a
BookKeeper ``bk_server.conf`` (`magnetar.cli._conf_files`), then the explicit flags, then ``--set
key=value`` overrides; every key is checked (see `BookieConfig`).
"""

from __future__ import annotations

import functools
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from magnetar.common.config import ConfigError, key_names, load_config, parse_overrides

from ._bookie_shell import make_shell
from ._common import fail_cleanly_on, log_stopped
from ._conf_files import read_conf, route_properties, unimplemented_warning
from ._gc_cli import gc_explain
from ._help import HelpGroup
from ._security import bookie_security_warning

_OPTIONS: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
    click.option(
        "--conf",
        "conf",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="TOML config file (see deploy/bookie.toml), or BookKeeper's bk_server.conf.",
    ),
    click.option("--journal-dir", default=None, help="Journal directory (journalDirectory)."),
    click.option("--ledger-dirs", default=None, help="Comma-separated ledger directories (ledgerDirectories)."),
    click.option("--port", type=int, default=None, help="Bookie protocol port (bookiePort)."),
    click.option("--http-port", type=int, default=None, help="HTTP port (httpServerPort)."),
    click.option("--metadata-url", default=None, help="Metadata store URL (metadataServiceUri)."),
    click.option("--bookie-id", default=None, help="Bookie id (bookieId); default advertisedAddress:port."),
    click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override any config key."),
]


def _fail_cleanly(func: Callable[..., Any]) -> Callable[..., Any]:
    """`fail_cleanly_on` with the bookie's errors and exit statuses (see `magnetar.cli._common`)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from bookie import BookieFatalError, CookieMismatchError  # the bookie package loads only when run
        from metadata import MetadataError

        expected = (ConfigError, CookieMismatchError, BookieFatalError, OSError, MetadataError)
        return fail_cleanly_on(*expected, name="bookie", fatal=(BookieFatalError,))(func)(*args, **kwargs)

    return wrapper


def _config_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


def _load(
    conf: Path | None,
    journal_dir: str | None,
    ledger_dirs: str | None,
    port: int | None,
    http_port: int | None,
    metadata_url: str | None,
    bookie_id: str | None,
    overrides: tuple[str, ...],
) -> Any:
    from bookie import BookieConfig

    table: dict[str, Any] = {}
    properties: dict[str, str] = {}
    if conf is not None:
        conf_file = read_conf(conf)
        if conf_file.properties is not None:  # a bk_server.conf (`_conf_files`)
            routed, ignored = route_properties(conf_file.properties, {"bookie": BookieConfig})
            properties = routed["bookie"]
            if ignored:
                logging.getLogger("magnetar").warning("%s", unimplemented_warning("bookie", conf, ignored))
        else:
            data = conf_file.toml
            table = data["bookie"] if isinstance(data.get("bookie"), dict) else data
    flags: dict[str, Any] = {}
    for key, value in (
        ("journal_dir", journal_dir),
        ("ledger_dirs", ledger_dirs),
        ("port", port),
        ("http_port", http_port),
        ("metadata_url", metadata_url),
        ("bookie_id", bookie_id),
    ):
        if value is not None:
            flags[key] = value if not isinstance(value, int) else str(value)
    flags.update(parse_overrides(overrides))
    # Flags and overrides may use either spelling of a key; drop the file's other spelling so that
    # a flag does not count as "given twice".
    names = key_names(BookieConfig)
    overridden = {names.get(k, k) for k in flags}
    table = {k: v for k, v in table.items() if names.get(k, k) not in overridden}
    return load_config(BookieConfig, table, flags, properties=properties)


@click.group(name="bookie", cls=HelpGroup, invoke_without_command=True)
@_config_options
@click.option("--log-level", default="INFO", show_default=True, help="Python logging level.")
@click.pass_context
@_fail_cleanly
def command(ctx: click.Context, log_level: str, **options: Any) -> None:
    """Run a bookie (storage node) until Ctrl-C or SIGTERM."""
    ctx.ensure_object(dict)
    ctx.obj["options"] = options
    if ctx.invoked_subcommand is not None:
        return
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = _load(**options)
    warning = bookie_security_warning(config)
    if warning:
        logging.getLogger("magnetar.bookie").warning(warning)
    import trio

    from bookie import serve_bookie_process

    stopped_by: list[str] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:

            async def watch_signals() -> None:
                with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for signum in signals:
                        click.echo(f"received {signal.Signals(signum).name}, shutting down", err=True)
                        stopped_by.append(signal.Signals(signum).name)
                        nursery.cancel_scope.cancel()
                        return

            nursery.start_soon(watch_signals)
            endpoints = await nursery.start(serve_bookie_process, config)
            http = ", ".join(endpoints.http_urls) or "disabled"
            click.echo(
                f"bookie {endpoints.bookie_id} listening on {config.listen_address}:{endpoints.port} "
                f"(http: {http}; metadata: {endpoints.metadata_url or 'none'})",
                err=False,
            )
            sys.stdout.flush()

    trio.run(main)
    click.echo("bookie stopped")
    log_stopped("bookie", stopped_by[0] if stopped_by else "its service ended")


@command.command(name="format")
@_config_options
@click.option("--force", is_flag=True, help="Delete the directories' contents and the metadata cookie.")
@click.pass_context
@_fail_cleanly
def format_command(ctx: click.Context, force: bool, **options: Any) -> None:
    """Initialise the bookie's directories and write its cookies."""
    parent = (ctx.obj or {}).get("options", {})
    merged = {k: (v if v not in (None, ()) else parent.get(k)) for k, v in options.items()}
    merged["overrides"] = tuple(parent.get("overrides", ())) + tuple(options.get("overrides", ()))
    config = _load(**merged)
    import trio

    from bookie import format_bookie
    from metadata import open_metadata_store

    async def main() -> Any:
        if not config.metadata_url:
            return await format_bookie(config, None, force=force)
        async with open_metadata_store(
            config.metadata_url, security=config.zk_security(), tls=config.zk_tls()
        ) as store:
            return await format_bookie(config, store, force=force)

    cookie = trio.run(main)
    click.echo(
        f"formatted bookie {cookie.bookie_id}: journal {cookie.journal_dir}, ledgers {', '.join(cookie.ledger_dirs)}"
    )


command.add_command(gc_explain)
command.add_command(make_shell(_config_options, _load))
