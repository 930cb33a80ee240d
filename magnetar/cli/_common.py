"""Helpers shared by the commands that run services: sectioned config and signal handling."""

from __future__ import annotations

import dataclasses
import functools
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import click
import trio

from magnetar.config import ConfigError, load_config, parse_overrides, read_toml

__all__ = ["load_sections", "run_until_signal", "setup_logging", "fail", "fail_cleanly_on"]


def load_sections(conf: Path | None, sections: Mapping[str, type], overrides: tuple[str, ...],
                  flags: Mapping[str, Mapping[str, Any]] | None = None,
                  defaults: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Load one config object per TOML table of ``conf``.

    ``overrides`` are ``section.key=value`` strings (``--set broker.brokerServicePort=6651``);
    ``flags`` are per-section values from explicit command-line options; ``defaults`` are
    per-section values (by field name) used where the file gives the key under neither spelling.
    A table of the file that is not in ``sections``, or an override naming an unknown section, is
    a `ConfigError`.
    """
    data = read_toml(conf) if conf is not None else {}
    for name, value in data.items():
        if name not in sections:
            raise ConfigError(name, f"unknown table; expected one of {', '.join(sections)}")
        if not isinstance(value, dict):
            raise ConfigError(name, "must be a table")
    per_section: dict[str, dict[str, Any]] = {name: dict((flags or {}).get(name, {})) for name in sections}
    for key, value in parse_overrides(overrides).items():
        section, dot, rest = key.partition(".")
        if not dot or section not in sections:
            raise ConfigError(key, f"an override must look like <table>.<key>=value, with a table among "
                                   f"{', '.join(sections)}")
        per_section[section][rest] = value
    tables = {name: _with_defaults(cls, data.get(name, {}), (defaults or {}).get(name, {}))
              for name, cls in sections.items()}
    return {name: load_config(cls, tables[name], per_section[name], section=name)
            for name, cls in sections.items()}


def _with_defaults(cls: type, table: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(table)
    aliases = {f.name: f.metadata.get("alias") for f in dataclasses.fields(cls)}
    for key, value in defaults.items():
        if key not in out and aliases.get(key) not in out:
            out[key] = value
    return out


def setup_logging(verbose: bool) -> None:
    """Log to stderr, INFO by default, DEBUG with ``-v``."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def fail(exc: BaseException) -> None:
    """Print a start-up error the way every command does and exit with status 2."""
    click.echo(f"error: {exc}", err=True)
    sys.exit(2)


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def fail_cleanly_on(*expected: type[BaseException]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a command so that an ``expected`` error (a bad config, a port in use, a cookie
    mismatch) ends it with `fail` instead of a traceback, also when it comes out of a nursery
    wrapped in an exception group; anything else propagates unchanged."""
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except expected as exc:
                fail(exc)
            except BaseExceptionGroup as group:
                match, rest = group.split(expected)
                if match is None or rest is not None:
                    raise
                fail(next(_leaves(match)))
        return wrapper
    return decorate


async def run_until_signal(main: Callable[..., Awaitable[Any]], on_started: Callable[[Any], None]) -> None:
    """Start ``main`` (a ``serve_x(task_status=...)`` function), call ``on_started`` with what it
    reports, and cancel it cleanly on SIGINT or SIGTERM (its shutdown code runs to the end)."""
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            started = await nursery.start(main)
            on_started(started)
            async for signum in signals:
                click.echo(f"received {signal.Signals(signum).name}, shutting down", err=True)
                nursery.cancel_scope.cancel()
                break
