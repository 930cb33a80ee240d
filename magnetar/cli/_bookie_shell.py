"""``magnetar bookie shell``: BookKeeper's bookie shell commands, with their names and flags.

Cluster commands talk to the metadata store and bookies named by the bookie config
(``magnetar bookie --conf bookie.toml shell ...`` or ``--metadata-url``):

* ``listbookies [-rw|-ro|-a] [-h]`` - registered bookies (writable, read-only or both);
* ``listledgers [-m] [-bookieid ID]`` - ledger ids (with ``-m`` their metadata), optionally only
  those with a fragment on one bookie;
* ``ledgermetadata -ledgerid N`` - one ledger's metadata as JSON;
* ``readledger -ledgerid N [-firstentryid A] [-lastentryid B] [-msg]`` - reads entries through
  the client without recovering the ledger (an open ledger stays open);
* ``simpletest [-ensemble E -writeQuorum Qw -ackQuorum Qa -numEntries N]`` - creates a ledger,
  writes N entries, reads them back, compares and deletes the ledger;
* ``recover BOOKIE... [-deleteCookie] [-l LEDGERID]`` - re-replicates, in this process, every
  fragment stored on the given (dead) bookies to live ones (BookKeeperAdmin's recoverBookieData);
* ``decommissionbookie -bookieid ID [--timeout S]`` - for a bookie that has been stopped: marks
  each of its ledgers under-replicated, waits until AutoRecovery has moved every fragment off it,
  then removes its cookie (so its id can never rejoin with stale data).

Local commands read the files of the bookie the config describes (run them beside the bookie):

* ``lastmark`` - the LastLogMark persisted in the ledger directories;
* ``readlog LOG [-msg] [-ledgerid N] [-entryid N]`` - the records of one entry log (id in hex, as
  its file name, or a path).

Exit status 0 on success, 1 when a check fails (simpletest mismatch, decommission timeout), 2 for
bad arguments or a missing config value, 3 when the store or the bookies cannot be reached.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import trio

from ._help import HelpGroup

__all__ = ["make_shell"]

EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3


def _metadata_json(ledger_id: int, meta: Any) -> dict[str, Any]:
    """BookKeeper's LedgerMetadata fields as JSON (password left out; times human-readable too)."""
    created = None
    if meta.ctime_ms:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(meta.ctime_ms / 1000)) + " UTC"
    return {
        "ledgerId": ledger_id,
        "state": meta.state.name,
        "ensembleSize": meta.ensemble_size,
        "writeQuorumSize": meta.write_quorum,
        "ackQuorumSize": meta.ack_quorum,
        "lastEntryId": meta.last_entry_id,
        "length": meta.length,
        "digestType": meta.digest_type.name,
        "ctime": meta.ctime_ms,
        "ctimeUtc": created,
        "ensembles": {str(s.first_entry_id): list(s.ensemble) for s in meta.segments},
        "customMetadata": {k: v.decode("utf-8", "replace") for k, v in meta.custom_metadata.items()},
    }


def _show(data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    return text if text.isprintable() else data.hex()


def config_of(ctx: click.Context) -> Any:
    """The ``BookieConfig`` the ``shell`` group loaded."""
    return ctx.obj["config"]


def run_cluster(ctx: click.Context, body: Callable[[Any, Any], Any]) -> Any:
    """Run ``body(store, config)`` on the configured metadata store, with clear errors."""
    from metadata import MetadataError, open_metadata_store

    config = config_of(ctx)
    if not config.metadata_url:
        click.echo("error: no metadata store: give --metadata-url or a --conf with metadata_url", err=True)
        raise SystemExit(EXIT_USAGE)

    async def main() -> Any:
        async with open_metadata_store(
            config.metadata_url, security=config.zk_security(), tls=config.zk_tls()
        ) as store:
            return await body(store, config)

    try:
        try:
            return trio.run(main)
        except BaseExceptionGroup as group:  # a store's nursery wraps what the body raised
            leaf: BaseException = group
            while isinstance(leaf, BaseExceptionGroup) and len(leaf.exceptions) == 1:
                leaf = leaf.exceptions[0]
            if leaf is group:
                raise
            raise leaf from None
    except (MetadataError, OSError) as exc:
        click.echo(f"error: {config.metadata_url}: {type(exc).__name__}: {exc}", err=True)
        raise SystemExit(EXIT_UNREACHABLE) from None


# ------------------------------------------------------------------ bookies


@click.command(name="listbookies")
@click.option("-rw", "--readwrite", is_flag=True, help="Writable bookies.")
@click.option("-ro", "--readonly", is_flag=True, help="Read-only bookies.")
@click.option("-a", "--all", "all_", is_flag=True, help="Both.")
@click.option("-h", "--hostnames", is_flag=True, help="Also print each bookie's host name.")
@click.pass_context
def listbookies(ctx: click.Context, readwrite: bool, readonly: bool, all_: bool, hostnames: bool) -> None:
    """List the bookies registered as available (BookKeeper's listbookies)."""
    if not (readwrite or readonly or all_):
        raise click.UsageError("give one of -rw, -ro or -a")
    from bk_client import LedgerManager

    async def body(store: Any, config: Any) -> list[tuple[str, list[str]]]:
        lm = LedgerManager(store, config.metadata_root)
        out = []
        if readwrite or all_:
            out.append(("ReadWrite Bookies :", await lm.list_bookies(writable=True)))
        if readonly or all_:
            out.append(("Readonly Bookies :", await lm.list_bookies(writable=False)))
        return out

    for title, bookies in run_cluster(ctx, body):
        click.echo(title)
        for b in sorted(bookies):
            click.echo(f"{b}({b.rsplit(':', 1)[0]})" if hostnames else b)
        if not bookies:
            click.echo("No bookie is available")


# ------------------------------------------------------------------ ledgers


@click.command(name="listledgers")
@click.option("-m", "--meta", is_flag=True, help="Print each ledger's metadata.")
@click.option("-bookieid", "--bookieid", "bookie_id", default=None, help="Only ledgers with a fragment on this bookie.")
@click.pass_context
def listledgers(ctx: click.Context, meta: bool, bookie_id: str | None) -> None:
    """List the ledgers in the metadata store (BookKeeper's listledgers)."""
    from bk_client import LedgerManager, NoSuchLedger

    async def body(store: Any, config: Any) -> None:
        lm = LedgerManager(store, config.metadata_root)
        async for lid in lm.iterate_ledger_ids():
            if meta or bookie_id:
                try:
                    md, _ = await lm.read(lid)
                except NoSuchLedger:
                    continue  # deleted while listing
                if bookie_id and not any(bookie_id in s.ensemble for s in md.segments):
                    continue
                click.echo(f"ledgerID: {lid}")
                if meta:
                    click.echo(json.dumps(_metadata_json(lid, md), indent=2))
            else:
                click.echo(f"ledgerID: {lid}")

    run_cluster(ctx, body)


@click.command(name="ledgermetadata")
@click.option("-ledgerid", "--ledgerid", "ledger_id", type=int, required=True, help="Ledger id.")
@click.pass_context
def ledgermetadata(ctx: click.Context, ledger_id: int) -> None:
    """Print one ledger's metadata (BookKeeper's ledgermetadata)."""
    from bk_client import LedgerManager, NoSuchLedger

    async def body(store: Any, config: Any) -> dict[str, Any] | None:
        try:
            md, _ = await LedgerManager(store, config.metadata_root).read(ledger_id)
        except NoSuchLedger:
            return None
        return _metadata_json(ledger_id, md)

    found = run_cluster(ctx, body)
    if found is None:
        click.echo(f"error: ledger {ledger_id} does not exist", err=True)
        raise SystemExit(EXIT_USAGE)
    click.echo(json.dumps(found, indent=2))


@click.command(name="readledger")
@click.option("-ledgerid", "--ledgerid", "ledger_id", type=int, required=True, help="Ledger id.")
@click.option("-firstentryid", "--firstentryid", "first", type=int, default=0, show_default=True)
@click.option(
    "-lastentryid",
    "--lastentryid",
    "last",
    type=int,
    default=-1,
    help="Last entry to read (-1: up to the last confirmed entry).",
)
@click.option("-msg", "--msg", "show", is_flag=True, help="Print each entry's content.")
@click.pass_context
def readledger(ctx: click.Context, ledger_id: int, first: int, last: int, show: bool) -> None:
    """Read a ledger's entries without recovering it (BookKeeper's readledger)."""
    from bk_client import BKError, BookKeeper, NoSuchLedger

    if first < 0:
        raise click.UsageError("-firstentryid must be >= 0")

    async def body(store: Any, config: Any) -> None:
        async with BookKeeper.open(store, root=config.metadata_root) as bk:
            try:
                md, _ = await bk.ledger_manager.read(ledger_id)
                handle = await bk.open_ledger(ledger_id, password=md.password, recovery=False)
            except NoSuchLedger:
                click.echo(f"error: ledger {ledger_id} does not exist", err=True)
                raise SystemExit(EXIT_USAGE) from None
            try:
                end = handle.last_add_confirmed if last < 0 else min(last, handle.last_add_confirmed)
                entry_id = first
                while entry_id <= end:
                    batch_end = min(end, entry_id + 99)  # bounded reads: 100 entries at a time
                    for e in await handle.read(entry_id, batch_end):
                        click.echo(f"--------- Lid={e.ledger_id}, Eid={e.entry_id}, Size={len(e.data)} ---------")
                        if show:
                            click.echo(f"Data: {_show(e.data)}")
                    entry_id = batch_end + 1
            finally:
                await handle.close()
            click.echo(f"read entries {first}..{end} of ledger {ledger_id} ({'closed' if md.is_closed else 'open'})")

    try:
        run_cluster(ctx, body)
    except BKError as exc:
        click.echo(f"error: reading ledger {ledger_id}: {type(exc).__name__}: {exc}", err=True)
        raise SystemExit(EXIT_UNREACHABLE) from None


@click.command(name="simpletest")
@click.option("-ensemble", "--ensemble", type=int, default=3, show_default=True)
@click.option("-writeQuorum", "--writeQuorum", "write_quorum", type=int, default=2, show_default=True)
@click.option("-ackQuorum", "--ackQuorum", "ack_quorum", type=int, default=2, show_default=True)
@click.option("-numEntries", "--numEntries", "num_entries", type=int, default=1000, show_default=True)
@click.pass_context
def simpletest(ctx: click.Context, ensemble: int, write_quorum: int, ack_quorum: int, num_entries: int) -> None:
    """Write entries to a new ledger, read them back and delete it (BookKeeper's simpletest)."""
    from bk_client import BKError, BookKeeper

    if not 1 <= ack_quorum <= write_quorum <= ensemble or num_entries < 1:
        raise click.UsageError("need 1 <= ackQuorum <= writeQuorum <= ensemble and numEntries >= 1")

    async def body(store: Any, config: Any) -> tuple[int, int]:
        async with BookKeeper.open(store, root=config.metadata_root) as bk:
            writer = await bk.create_ledger(ensemble, write_quorum, ack_quorum, password=b"simpletest")
            lid = writer.ledger_id
            try:
                payloads = [f"simpletest {lid} entry {i}".encode() for i in range(num_entries)]
                for p in payloads:
                    await writer.add_entry(p)
                await writer.close()
                on = ", ".join(writer.metadata.segments[0].ensemble)
                click.echo(f"{num_entries} entries written to ledger {lid} on {on}")
                reader = await bk.open_ledger(lid, password=b"simpletest", recovery=False)
                bad = 0
                for start in range(0, num_entries, 100):
                    for e in await reader.read(start, min(num_entries, start + 100) - 1):
                        bad += e.data != payloads[e.entry_id]
                await reader.close()
                return lid, bad
            finally:
                await bk.delete_ledger(lid)

    try:
        lid, bad = run_cluster(ctx, body)
    except (BKError, ValueError) as exc:
        click.echo(f"error: simpletest failed: {type(exc).__name__}: {exc}", err=True)
        raise SystemExit(EXIT_CHECK_FAILED) from None
    if bad:
        click.echo(f"error: {bad} of {num_entries} entries read back differ", err=True)
        raise SystemExit(EXIT_CHECK_FAILED)
    click.echo(f"{num_entries} entries read back and verified; ledger {lid} deleted")


# ------------------------------------------------------------------ recovery and decommission


async def ledgers_on(lm: Any, bookies: set[str], only: int | None) -> list[int]:
    """The ledgers (all, or ``only``) with a fragment on one of ``bookies``."""
    from bk_client import NoSuchLedger

    ids = [only] if only is not None else [lid async for lid in lm.iterate_ledger_ids()]
    found = []
    for lid in ids:
        try:
            md, _ = await lm.read(lid)
        except NoSuchLedger:
            continue
        if any(bookies & set(s.ensemble) for s in md.segments):
            found.append(lid)
    return found


async def remove_bookie(store: Any, root: str, bookie: str) -> list[str]:
    """Delete ``bookie``'s cookie and registrations; the paths that were there."""
    from metadata import NoNodeError
    from protocols.bookkeeper import available_path, cookie_path, readonly_path

    removed = []
    for path in (cookie_path(root, bookie), available_path(root, bookie), readonly_path(root, bookie)):
        try:
            await store.delete(path)
            removed.append(path)
        except NoNodeError:
            pass
    return removed


@click.command(name="recover")
@click.argument("bookies", nargs=-1, required=True)
@click.option(
    "-deleteCookie",
    "--deleteCookie",
    "delete_cookie",
    is_flag=True,
    help="Remove the bookies' cookies once their data is re-replicated.",
)
@click.option("-l", "--ledger", "only", type=int, default=None, help="Recover only this ledger.")
@click.option("-f", "--force", is_flag=True, help="Recover even while a bookie is registered as available.")
@click.pass_context
def recover(ctx: click.Context, bookies: tuple[str, ...], delete_cookie: bool, only: int | None, force: bool) -> None:
    """Re-replicate the fragments on dead BOOKIES to live bookies, in this process."""
    from autorecovery import ReplicationOutcome, ReplicationWorker, UnderReplicationManager
    from bk_client import BKError, BookKeeper, LedgerManager

    targets = set(bookies)

    async def body(store: Any, config: Any) -> tuple[list[int], list[int]]:
        root = config.metadata_root
        lm = LedgerManager(store, root)
        live = set(await lm.list_bookies(writable=True)) | set(await lm.list_bookies(writable=False))
        if targets & live and not force:
            click.echo(
                f"error: {', '.join(sorted(targets & live))} still registered as available: stop the "
                "bookie first (or pass -f to copy its data anyway)",
                err=True,
            )
            raise SystemExit(EXIT_USAGE)
        todo = await ledgers_on(lm, targets, only)
        click.echo(f"{len(todo)} ledger(s) have fragments on {', '.join(sorted(targets))}")
        urm = UnderReplicationManager(store, root, identity=f"bookie-shell-recover-{os.getpid()}")
        failed = []
        async with BookKeeper.open(store, root=root) as bk:
            worker = ReplicationWorker(bk, urm, open_ledger_grace_period_s=0.0, name="recover")
            for lid in todo:
                await urm.mark(lid, targets)
                record = await urm.try_lock(lid)
                if record is None:  # an AutoRecovery worker holds it: it does the copy
                    click.echo(f"  ledger {lid}: being re-replicated by AutoRecovery")
                    continue
                outcome = await worker.process(record)
                ok = outcome is ReplicationOutcome.REPLICATED
                click.echo(f"  ledger {lid}: {'re-replicated' if ok else 'FAILED'}")
                if not ok:
                    failed.append(lid)
        if delete_cookie and not failed and only is None:
            for b in sorted(targets):
                for path in await remove_bookie(store, root, b):
                    click.echo(f"  removed {path}")
        return todo, failed

    try:
        todo, failed = run_cluster(ctx, body)
    except BKError as exc:
        click.echo(f"error: recover failed: {type(exc).__name__}: {exc}", err=True)
        raise SystemExit(EXIT_CHECK_FAILED) from None
    if failed:
        click.echo(f"error: {len(failed)} ledger(s) not recovered: {failed}", err=True)
        raise SystemExit(EXIT_CHECK_FAILED)
    click.echo(f"recovered {len(todo)} ledger(s)")


@click.command(name="decommissionbookie")
@click.option("-bookieid", "--bookieid", "bookie_id", required=True, help="The (stopped) bookie to retire.")
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=3600.0,
    show_default=True,
    help="Seconds to wait for AutoRecovery to move its data.",
)
@click.pass_context
def decommissionbookie(ctx: click.Context, bookie_id: str, timeout_s: float) -> None:
    """Retire a stopped bookie: AutoRecovery re-replicates its ledgers, then its cookie goes."""
    from autorecovery import UnderReplicationManager, current_auditor
    from bk_client import LedgerManager

    async def body(store: Any, config: Any) -> bool:
        root = config.metadata_root
        lm = LedgerManager(store, root)
        live = set(await lm.list_bookies(writable=True)) | set(await lm.list_bookies(writable=False))
        if bookie_id in live:
            click.echo(f"error: {bookie_id} is still registered as available: stop it first", err=True)
            raise SystemExit(EXIT_USAGE)
        if await current_auditor(store, root) is None:
            click.echo(
                "warning: no AutoRecovery auditor is running; the marked ledgers wait for `magnetar autorecovery`",
                err=True,
            )
        urm = UnderReplicationManager(store, root)
        todo = await ledgers_on(lm, {bookie_id}, None)
        for lid in todo:
            await urm.mark(lid, [bookie_id])
        click.echo(f"{len(todo)} ledger(s) of {bookie_id} marked under-replicated; waiting for AutoRecovery")
        with trio.move_on_after(timeout_s):
            while todo:
                await trio.sleep(1.0)
                left = await ledgers_on(lm, {bookie_id}, None)
                if len(left) != len(todo):
                    click.echo(f"  {len(left)} ledger(s) still have fragments on {bookie_id}")
                for lid in set(left) - set(todo):  # created while we waited (cannot be: it is down)
                    await urm.mark(lid, [bookie_id])
                todo = left
        if todo:
            click.echo(
                f"error: after {timeout_s:.0f}s {len(todo)} ledger(s) still have fragments on {bookie_id}: {todo[:20]}",
                err=True,
            )
            return False
        for path in await remove_bookie(store, root, bookie_id):
            click.echo(f"  removed {path}")
        return True

    if not run_cluster(ctx, body):
        raise SystemExit(EXIT_CHECK_FAILED)
    click.echo(f"bookie {bookie_id} decommissioned")


# ------------------------------------------------------------------ local files


@click.command(name="lastmark")
@click.pass_context
def lastmark(ctx: click.Context) -> None:
    """Print the LastLogMark persisted in the ledger directories (BookKeeper's lastmark), one
    line per journal directory when there are several (``journalDirectories``)."""
    from bookie.journal import last_mark_file, read_last_mark

    config = config_of(ctx)
    journals = config.journal_directories
    for i, journal in enumerate(journals):
        mark = read_last_mark(config.ledger_dirs, last_mark_file(i))
        where = f" [{journal}]" if len(journals) > 1 else ""
        click.echo(f"LastLogMark{where} : Journal Id - {mark.file_id}({mark.file_id:x}.txn), Pos - {mark.offset}")


@click.command(name="readlog")
@click.argument("log")
@click.option("-msg", "--msg", "show", is_flag=True, help="Print each entry's content.")
@click.option("-ledgerid", "--ledgerid", "ledger_id", type=int, default=None, help="Only this ledger.")
@click.option("-entryid", "--entryid", "entry_id", type=int, default=None, help="Only this entry.")
@click.pass_context
def readlog(ctx: click.Context, log: str, show: bool, ledger_id: int | None, entry_id: int | None) -> None:
    """Print the records of entry log LOG (hex id, file name or path; BookKeeper's readlog)."""
    from bookie.storage import (
        HEADER_SIZE,
        INVALID_LEDGER_ID,
        CorruptLogError,
        decode_header,
        iter_records,
        log_file_name,
        parse_log_file_name,
    )
    from protocols.bookkeeper import DigestMismatch, decode_entry

    path = Path(log)
    if not path.exists():
        name = log if parse_log_file_name(log) is not None else None
        if name is None:
            try:
                name = log_file_name(int(log, 16))
            except ValueError:
                raise click.UsageError(f"{log!r} is neither an entry log id (hex) nor a file") from None
        found = [Path(d) / name for d in config_of(ctx).ledger_dirs if (Path(d) / name).exists()]
        if not found:
            click.echo(f"error: no entry log {name} in {', '.join(config_of(ctx).ledger_dirs)}", err=True)
            raise SystemExit(EXIT_USAGE)
        path = found[0]
    data = path.read_bytes()  # one log is bounded by logSizeLimit
    try:
        header = decode_header(data)
    except CorruptLogError as exc:
        click.echo(f"error: {path}: {exc}", err=True)
        raise SystemExit(EXIT_CHECK_FAILED) from None
    state = f"rolled, {header.ledgers_count} ledgers" if header.ledgers_map_offset else "current"
    click.echo(f"Scan entry log {path} (format v{header.version}, {state})")
    end = header.ledgers_map_offset or None
    count = 0
    for offset, lid, eid, payload in iter_records(data, HEADER_SIZE, end):
        if (
            lid == INVALID_LEDGER_ID
            or (ledger_id is not None and lid != ledger_id)
            or (entry_id is not None and eid != entry_id)
        ):
            continue
        count += 1
        click.echo(f"--------- Lid={lid}, Eid={eid}, ByteOffset={offset}, EntrySize={len(payload)} ---------")
        if show:
            try:  # an entry is stored digest-framed, as the client sent it
                entry = decode_entry(payload, lid, eid)
                click.echo(f"LAC: {entry.last_add_confirmed}, Length: {entry.length}, digest ok")
                click.echo(f"Data: {_show(entry.payload)}")
            except DigestMismatch as exc:
                click.echo(f"not a verified entry ({exc}); raw: {bytes(payload).hex()}")
    click.echo(f"{count} entries")


COMMANDS = (
    listbookies,
    listledgers,
    ledgermetadata,
    readledger,
    simpletest,
    recover,
    decommissionbookie,
    lastmark,
    readlog,
)


def make_shell(
    config_options: Callable[[Callable[..., Any]], Callable[..., Any]], load: Callable[..., Any]
) -> click.Group:
    """The ``shell`` group; ``config_options`` adds the bookie config flags and ``load`` turns
    them into a ``BookieConfig`` (both from ``cmd_bookie``, so flags and files mean the same).
    The commands are this module's; the group only loads the config they read (`config_of`)."""

    @click.group(name="shell", cls=HelpGroup)
    @config_options
    @click.pass_context
    def shell(ctx: click.Context, **options: Any) -> None:
        """BookKeeper's bookie shell: inspect and administer bookies and ledgers."""
        parent = (ctx.obj or {}).get("options", {})
        merged = {k: (v if v not in (None, ()) else parent.get(k)) for k, v in options.items()}
        merged["overrides"] = tuple(parent.get("overrides", ())) + tuple(options.get("overrides", ()))
        from magnetar.common.config import ConfigError

        try:
            ctx.obj = {**(ctx.obj or {}), "config": load(**merged)}
        except ConfigError as exc:
            raise click.UsageError(str(exc)) from None

    for command in COMMANDS:
        shell.add_command(command)
    return shell
