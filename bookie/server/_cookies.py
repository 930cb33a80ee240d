"""Cookies: tie the journal and ledger directories to one bookie id, on disk and in metadata.

A cookie (`protocols.bookkeeper.Cookie`, in BookKeeper's text form) is written as the file
``VERSION`` in the journal directory and in every ledger directory (BookKeeper keeps it in their
``current/`` subdirectories), and at ``{root}/ledgers/cookies/{bookieId}`` in the metadata store.
At start-up `check_cookies` compares them all with the cookie the configuration describes:

* nothing anywhere and every directory empty: a new bookie; the cookies are written;
* every copy present and equal to the expected cookie: start (copies in the form earlier Magnetar
  versions wrote are rewritten in BookKeeper's);
* anything else (a copy missing, a different bookie id or directory list, data without a cookie,
  a metadata cookie for directories that are empty) refuses to start with `CookieMismatchError`
  naming each difference; ``magnetar bookie format`` (`format_bookie`) resets the directories.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import trio

from magnetar.common.config import ConfigError
from metadata import MetadataStore, NodeExistsError, NoNodeError, ensure_path
from protocols.bookkeeper import (
    INSTANCEID,
    Cookie,
    CookieFormatError,
    LayoutFormatError,
    LedgerLayout,
    cookie_path,
    decode_layout,
    encode_layout,
    layout_conflict,
    layout_path,
    ledgers_root,
    parse_layout_name,
)

from .._errors import BookieException
from ._config import BookieConfig

__all__ = [
    "COOKIE_FILE",
    "CookieMismatchError",
    "expected_cookie",
    "check_cookies",
    "check_ledger_layout",
    "format_bookie",
]

log = logging.getLogger(__name__)

COOKIE_FILE = "VERSION"


class CookieMismatchError(BookieException):
    """The directories or the metadata store belong to another bookie (or to none).

    ``problems`` lists each difference found; the message says how to fix it.
    """

    def __init__(self, problems: list[str]) -> None:
        super().__init__(
            "refusing to start: the bookie's cookies do not match its configuration:\n  - "
            + "\n  - ".join(problems)
            + "\n(check bookieId, journalDirectory and ledgerDirectories; "
            "`magnetar bookie format --force` wipes the directories and starts afresh)"
        )
        self.problems = problems


def _dirs(config: BookieConfig) -> list[Path]:
    return [*(Path(d) for d in config.journal_directories), *(Path(d) for d in config.ledger_dirs)]


async def _instance_id(store: MetadataStore | None, root: str) -> str:
    if store is None:
        return ""
    try:
        data, _ = await store.get(f"{ledgers_root(root)}/{INSTANCEID}")
    except NoNodeError:
        return ""
    return data.decode("utf-8", "replace")


async def expected_cookie(config: BookieConfig, store: MetadataStore | None) -> Cookie:
    """The cookie this configuration should find (instance id from the store, if any)."""

    def resolved() -> tuple[str, tuple[str, ...]]:  # resolving follows links on disk: a worker thread
        # several journal directories: comma separated, as BookKeeper's cookie lists them
        return (
            ",".join(str(Path(d).resolve()) for d in config.journal_directories),
            tuple(str(Path(d).resolve()) for d in config.ledger_dirs),
        )

    journal_dir, ledger_dirs = await trio.to_thread.run_sync(resolved)
    return Cookie(config.effective_bookie_id, journal_dir, ledger_dirs, await _instance_id(store, config.metadata_root))


def _read_local(directories: list[Path]) -> tuple[dict[Path, Cookie | None], list[Path], list[str]]:
    """Blocking: the cookie of each directory, the non-empty ones without a cookie, and errors."""
    found: dict[Path, Cookie | None] = {}
    data_without: list[Path] = []
    errors: list[str] = []
    for d in directories:
        d.mkdir(parents=True, exist_ok=True)
        f = d / COOKIE_FILE
        try:
            found[d] = Cookie.decode(f.read_bytes())
        except FileNotFoundError:
            found[d] = None
            if any(p.name != "lost+found" for p in d.iterdir()):
                data_without.append(d)
        except (OSError, CookieFormatError) as exc:
            found[d] = None
            errors.append(f"{f}: unreadable cookie ({exc})")
    return found, data_without, errors


def _write_local(directories: list[Path], cookie: Cookie) -> None:
    data = cookie.encode()
    for d in directories:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / (COOKIE_FILE + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, d / COOKIE_FILE)


async def check_ledger_layout(config: BookieConfig, store: MetadataStore | None) -> LedgerLayout:
    """Record the configured ledger layout (hierarchical when none is) in ``{root}/ledgers/LAYOUT``
    if the cluster has none, else check the recorded one is the one configured, or adopt it when
    none is; return the layout in force. GC lists ledger metadata in that layout, and listing
    another would miss ledgers and delete their local data.

    Raises ``ConfigError`` (``ledger_manager_factory_class``) when they differ or the node is not a
    layout Magnetar implements; metadata-store errors pass through. Without a store, the
    configured layout (or hierarchical).
    """
    configured = parse_layout_name(config.ledger_manager_factory_class)
    if store is None:
        return configured or LedgerLayout.HIERARCHICAL
    path = layout_path(config.metadata_root)
    try:
        await store.create(path, encode_layout(configured or LedgerLayout.HIERARCHICAL), make_parents=True)
        return configured or LedgerLayout.HIERARCHICAL
    except NodeExistsError:
        data, _ = await store.get(path)
    try:
        recorded = decode_layout(data)
    except LayoutFormatError as exc:
        raise ConfigError("ledger_manager_factory_class", f"{path}: {exc}") from None
    conflict = layout_conflict(recorded, configured)
    if conflict is not None:
        raise ConfigError("ledger_manager_factory_class", conflict)
    return recorded


async def check_cookies(config: BookieConfig, store: MetadataStore | None) -> Cookie:
    """Verify (or, for a brand-new bookie, write) the cookies; return the cookie in force.

    Raises `CookieMismatchError` listing every problem. Without a store only the directories
    are compared.
    """
    expected = await expected_cookie(config, store)
    directories = _dirs(config)
    found, data_without, problems = await trio.to_thread.run_sync(_read_local, directories)
    path = cookie_path(config.metadata_root, expected.bookie_id)
    remote: Cookie | None = None
    raw: bytes | None = None
    if store is not None:
        try:
            raw, _ = await store.get(path)
            remote = Cookie.decode(raw)
        except NoNodeError:
            remote = None
        except CookieFormatError as exc:
            problems.append(f"metadata cookie {path} is unreadable ({exc})")
    present = {d: c for d, c in found.items() if c is not None}
    if not present and remote is None and not data_without and not problems:
        log.info("new bookie %s: writing cookies", expected.bookie_id)
        await _write_cookies(config, store, expected)
        return expected
    for d, c in found.items():
        if c is None:
            if d in data_without:
                problems.append(f"{d} holds data but has no cookie")
            elif present or remote is not None:
                problems.append(f"{d} has no cookie (a new or replaced directory?)")
        elif c != expected:
            diffs = ", ".join(
                f"{name}: found {getattr(c, name)!r}, expected {getattr(expected, name)!r}"
                for name in c.mismatches(expected)
            )
            problems.append(f"{d / COOKIE_FILE} differs ({diffs})")
    if store is not None:
        if remote is None:
            problems.append(f"no cookie in the metadata store at {path}")
        elif remote != expected:
            diffs = ", ".join(
                f"{name}: found {getattr(remote, name)!r}, expected {getattr(expected, name)!r}"
                for name in remote.mismatches(expected)
            )
            problems.append(f"metadata cookie {path} differs ({diffs})")
    if problems:
        raise CookieMismatchError(problems)
    stale = await trio.to_thread.run_sync(_older_forms, directories)
    if store is not None and raw is not None and not Cookie.is_current(raw):
        stale = True
    if stale:  # matching cookies in an earlier Magnetar form: rewrite them as BookKeeper writes them
        log.info("rewriting the cookies of %s in BookKeeper's format", expected.bookie_id)
        await _write_cookies(config, store, expected)
    return expected


def _older_forms(directories: list[Path]) -> bool:
    """Blocking: whether a directory's cookie is in a form older than ``Cookie.encode``'s."""
    for d in directories:
        try:
            if not Cookie.is_current((d / COOKIE_FILE).read_bytes()):
                return True
        except OSError:
            pass
    return False


async def _write_cookies(config: BookieConfig, store: MetadataStore | None, cookie: Cookie) -> None:
    await trio.to_thread.run_sync(_write_local, _dirs(config), cookie)
    if store is not None:
        path = cookie_path(config.metadata_root, cookie.bookie_id)
        await ensure_path(store, cookie_path(config.metadata_root))
        try:
            await store.create(path, cookie.encode())
        except NodeExistsError:
            await store.set(path, cookie.encode(), version=-1)


async def format_bookie(config: BookieConfig, store: MetadataStore | None, *, force: bool = False) -> Cookie:
    """Initialise the directories and write fresh cookies (``magnetar bookie format``).

    Without ``force`` it refuses (`CookieMismatchError`) when a directory already holds data or
    a cookie exists in the metadata store; with ``force`` it deletes the directories' contents
    and replaces the metadata cookie. Returns the cookie written.
    """
    expected = await expected_cookie(config, store)
    directories = _dirs(config)
    if not force:
        found, data_without, problems = await trio.to_thread.run_sync(_read_local, directories)
        problems += [f"{d} already has a cookie" for d, c in found.items() if c is not None]
        problems += [f"{d} already holds data" for d in data_without]
        if store is not None and await store.exists(cookie_path(config.metadata_root, expected.bookie_id)):
            problems.append(f"a cookie for {expected.bookie_id} exists in the metadata store")
        if problems:
            raise CookieMismatchError(problems)
    else:

        def wipe() -> None:
            for d in directories:
                if d.exists():
                    for p in d.iterdir():
                        if p.is_dir() and not p.is_symlink():
                            shutil.rmtree(p)
                        else:
                            p.unlink()

        await trio.to_thread.run_sync(wipe)
    await _write_cookies(config, store, expected)
    return expected
