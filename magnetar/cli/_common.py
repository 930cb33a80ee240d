"""Helpers shared by the commands that run services: sectioned config, signal handling, exit codes.

Exit status of ``magnetar broker``, ``magnetar bookie`` and ``magnetar standalone`` (and ``bookie
format``), and what their last line on stderr (a log record) says:

* 0 - stopped by SIGINT or SIGTERM after a clean shutdown (``... stopped (SIGTERM)``);
* 1 - an unexpected error, a bug (``... stopped by an unexpected error: ...`` with the traceback);
* 2 - a bad configuration or command line: nothing was started (`EXIT_CONFIG`);
* 3 - could not start: a port in use, unusable directories, a cookie mismatch, an unreachable
  metadata store (`EXIT_START`);
* 4 - had to stop while running, e.g. full disks with ``readOnlyModeEnabled = false``
  (`EXIT_FATAL`).

Every non-zero exit prints ``error: <reason>`` and then logs ``magnetar <name> stopped: <reason>
(exit status N)`` at CRITICAL, so that the last line of the process's log says why it stopped.
"""

from __future__ import annotations

import functools
import gc
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import click
import trio

from magnetar.common.config import ConfigError, key_names, load_config, parse_overrides

from ._conf_files import read_conf, route_properties, unimplemented_warning

__all__ = [
    "EXIT_CONFIG",
    "EXIT_FATAL",
    "EXIT_START",
    "load_sections",
    "run_until_signal",
    "setup_logging",
    "fail",
    "fail_cleanly_on",
    "log_stopped",
]

EXIT_BUG = 1
EXIT_CONFIG = 2
EXIT_START = 3
EXIT_FATAL = 4

log = logging.getLogger("magnetar")


def load_sections(
    conf: Path | None,
    sections: Mapping[str, type],
    overrides: tuple[str, ...],
    flags: Mapping[str, Mapping[str, Any]] | None = None,
    defaults: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    command: str = "",
) -> dict[str, Any]:
    """Load one config object per table of ``conf``.

    ``conf`` is a TOML file with one table per section, or a Java-properties file in Pulsar's or
    BookKeeper's format whose keys go to every section that accepts them (`_conf_files`: the keys
    Pulsar or BookKeeper define that no section implements are named in one WARNING log record,
    as ``magnetar <command>``; a key nobody defines is a `ConfigError`).
    ``overrides`` are ``section.key=value`` strings (``--set broker.brokerServicePort=6651``);
    ``flags`` are per-section values from explicit command-line options; ``defaults`` are
    per-section values (by field name) used where the file gives the key under neither spelling.
    A table of the file that is not in ``sections``, or an override naming an unknown section, is
    a `ConfigError`.
    """
    conf_file = read_conf(conf) if conf is not None else None
    data = conf_file.toml if conf_file is not None else {}
    for name, value in data.items():
        if name not in sections:
            raise ConfigError(name, f"unknown table; expected one of {', '.join(sections)}")
        if not isinstance(value, dict):
            raise ConfigError(name, "must be a table")
    properties: dict[str, dict[str, str]] = {name: {} for name in sections}
    if conf_file is not None and conf_file.properties is not None:
        properties, ignored = route_properties(conf_file.properties, sections)
        if ignored:
            log.warning("%s", unimplemented_warning(command or "", conf_file.path, ignored))
    per_section: dict[str, dict[str, Any]] = {name: dict((flags or {}).get(name, {})) for name in sections}
    for key, value in parse_overrides(overrides).items():
        section, dot, rest = key.partition(".")
        if not dot or section not in sections:
            raise ConfigError(
                key, f"an override must look like <table>.<key>=value, with a table among {', '.join(sections)}"
            )
        per_section[section][rest] = value
    tables = {
        name: _with_defaults(cls, data.get(name, {}), (defaults or {}).get(name, {})) for name, cls in sections.items()
    }
    return {
        name: load_config(cls, tables[name], per_section[name], section=name, properties=properties[name])
        for name, cls in sections.items()
    }


def _with_defaults(cls: type, table: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(table)
    names = key_names(cls)
    given = {names.get(k, k) for k in out}
    for key, value in defaults.items():
        if names.get(key, key) not in given:
            out[key] = value
    return out


def setup_logging(verbose: bool) -> None:
    """Log to stderr, INFO by default, DEBUG with ``-v``."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def fail(exc: BaseException, status: int = EXIT_CONFIG, name: str = "") -> None:
    """Print an error the way every command does, log why the process stops (the module's last
    line) and exit with ``status`` (2, a bad configuration, unless told)."""
    click.echo(f"error: {exc}", err=True)
    log.critical("magnetar%s stopped: %s (exit status %d)", f" {name}" if name else "", exc, status)
    sys.exit(status)


def log_stopped(name: str, why: str) -> None:
    """Log the last line of a clean stop (exit status 0)."""
    log.info("magnetar %s stopped (%s)", name, why)


def _status(exc: BaseException, fatal: tuple[type[BaseException], ...]) -> int:
    if isinstance(exc, ConfigError):
        return EXIT_CONFIG
    if fatal and isinstance(exc, fatal):
        return EXIT_FATAL
    return EXIT_START


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def fail_cleanly_on(
    *expected: type[BaseException], name: str = "", fatal: tuple[type[BaseException], ...] = ()
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a command so that an ``expected`` error (a bad config, a port in use, a cookie
    mismatch) ends it with `fail` instead of a traceback, also when it comes out of a nursery
    wrapped in an exception group, with the module's exit status: `EXIT_CONFIG` for a
    ConfigError, `EXIT_FATAL` for the ``fatal`` types (errors that stop a running service), else
    `EXIT_START`. Any other exception is logged as the reason the process stops (``name`` names
    it), with its traceback, and exits with status 1; click's own exceptions pass."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except expected as exc:
                fail(exc, _status(exc, fatal), name)
            except BaseExceptionGroup as group:
                match, rest = group.split(expected)
                if (match is None or rest is not None) and isinstance(group, Exception):
                    _stop_on_bug(name, group)
                if match is None or rest is not None:
                    raise
                first = next(_leaves(match))
                fail(first, _status(first, fatal), name)
            except (click.ClickException, click.exceptions.Exit, click.Abort):
                raise
            except Exception as exc:
                _stop_on_bug(name, exc)

        return wrapper

    return decorate


def _stop_on_bug(name: str, exc: Exception) -> None:
    """Log an unexpected error with its traceback, then the reason line, and exit with status 1."""
    label = f"magnetar {name}" if name else "magnetar"
    log.error("%s: unexpected error", label, exc_info=exc)
    log.critical("%s stopped by an unexpected error: %r (exit status %d)", label, exc, EXIT_BUG)
    sys.exit(EXIT_BUG)


SERVER_SWITCH_INTERVAL_S = 0.0005
"""The GIL switch interval of the server commands (Python's default is 5 ms); see
`run_until_signal`. At 20,000 msg/s batched after an unbatched warm-up, p99 send -> receipt was
25 - 28 ms with 0.5 ms against 57 - 128 ms with 5 ms (bench/RESULTS.md)."""


async def run_until_signal(main: Callable[..., Awaitable[Any]], on_started: Callable[[Any], None]) -> str | None:
    """Start ``main`` (a ``serve_x(task_status=...)`` function), call ``on_started`` with what it
    reports, and cancel it cleanly on SIGINT or SIGTERM (its shutdown code runs to the end);
    return the signal's name (None when ``main`` returned by itself).

    Once started, the objects made so far (modules, classes, functions, configs: nearly all the
    objects the cyclic GC tracks) are frozen out of its collections: a full collection otherwise
    walks them all on the event loop, a stall of tens of milliseconds under load
    (bench/loop_stall_bench.py).

    The GIL switch interval is lowered to `SERVER_SWITCH_INTERVAL_S` for the same reason: worker
    threads running Python (the bookie's write-cache flush sorting and writing a half) otherwise
    keep the GIL for up to 5 ms each time the event loop gives it up for a system call, and a
    loop step with a few sends waited tens of milliseconds.
    """
    sys.setswitchinterval(SERVER_SWITCH_INTERVAL_S)
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            started = await nursery.start(main)
            on_started(started)
            gc.collect()
            gc.freeze()
            async for signum in signals:
                click.echo(f"received {signal.Signals(signum).name}, shutting down", err=True)
                nursery.cancel_scope.cancel()
                return signal.Signals(signum).name
    return None
