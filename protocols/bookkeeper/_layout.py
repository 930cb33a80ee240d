"""Where ledger and bookie records live in the metadata store (pure path arithmetic).

Magnetar uses ONE ledger layout: BookKeeper's *long hierarchical* layout, because ledger ids
are unique 64-bit integers (0 <= id < 2**63) and the 10-digit hierarchical layout only reaches
10**10 - 1. The id is written as 19 zero-padded decimal digits and split 3/4/4/4/4, the last
level prefixed with ``L``::

    {root}/ledgers/{d0-2}/{d3-6}/{d7-10}/{d11-14}/L{d15-18}
    id 1          -> {root}/ledgers/000/0000/0000/0000/L0001

so no znode has more than 10,000 children (1,000 at the top). The 10-digit hierarchical
layout (``{root}/ledgers/{2}/{4}/L{4}``) is provided as ``short_ledger_path`` /
``short_ledger_id`` for tools that read BookKeeper clusters; Magnetar never writes it.

Listing: GC and the auditor walk the tree level by level. ``ledger_level_children`` keeps the
children of a level that are layout nodes (dropping ``available``, ``cookies``, ``idgen``,
``LAYOUT`` ... under the ledgers root) in id order, ``ledger_ids_in`` turns the leaf names under
a level-4 node into ids, and ``id_range_of`` gives the id range a partial path covers, so a scan
can resume or stop range by range.

The flat layout (BookKeeper's ``FlatLedgerManager``) is the other choice
(``ledgerManagerFactoryClass``): every ledger is a child of the ledgers root named ``L`` + the id
in at least 10 zero-padded digits (``{root}/ledgers/L0000000001``), listed with one
``children`` call. It suits clusters with few ledgers (BookKeeper advises hierarchical beyond
~50,000: the child list of one znode must fit in a ZooKeeper packet). Ids come from the same
``idgen-long`` generator in both layouts.

The layout in use is recorded in the ``{root}/ledgers/LAYOUT`` node as BookKeeper's
``LedgerLayout`` text, the layout-format version line then ``factoryClass:managerVersion``::

    2
    org.apache.bookkeeper.meta.FlatLedgerManagerFactory:1

The first client or bookie to start writes it from its config; every later one must be configured
with the same layout (``layout_conflict`` says why not), because the two layouts cannot see each
other's ledgers.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

__all__ = [
    "AVAILABLE",
    "COOKIES",
    "IDGEN",
    "LedgerLayout",
    "LayoutFormatError",
    "INSTANCEID",
    "LAYOUT",
    "LEDGERS",
    "LEDGER_LEVELS",
    "MAX_LEDGER_ID",
    "READONLY",
    "UNDERREPLICATION",
    "available_path",
    "cookie_path",
    "decode_layout",
    "encode_layout",
    "flat_ledger_ids",
    "id_range_of",
    "ledger_id_from_path",
    "ledger_ids_in",
    "ledger_level_children",
    "layout_conflict",
    "layout_path",
    "ledger_path",
    "ledgers_root",
    "parse_layout_name",
    "readonly_path",
    "short_ledger_id",
    "short_ledger_path",
]

LEDGERS = "ledgers"
AVAILABLE = "available"
READONLY = "readonly"
COOKIES = "cookies"
UNDERREPLICATION = "underreplication"
IDGEN = "idgen-long"
INSTANCEID = "INSTANCEID"
LAYOUT = "LAYOUT"

MAX_LEDGER_ID = 2**63 - 1
LEDGER_LEVELS = (3, 4, 4, 4, 4)
"""Digits per level of the long hierarchical layout; the last level carries the ``L`` prefix."""
_DIGITS = sum(LEDGER_LEVELS)
_PREFIX = "L"


def _join(root: str, *parts: str) -> str:
    root = root.rstrip("/")
    return "/".join((root, *parts))


def ledgers_root(root: str) -> str:
    """``{root}/ledgers``; ``root`` is the cluster's metadata root ("" or "/magnetar", ...)."""
    return _join(root, LEDGERS)


def available_path(root: str, bookie_id: str | None = None) -> str:
    """``{root}/ledgers/available`` or, with ``bookie_id``, the bookie's ephemeral node."""
    base = _join(root, LEDGERS, AVAILABLE)
    return base if bookie_id is None else f"{base}/{bookie_id}"


def readonly_path(root: str, bookie_id: str | None = None) -> str:
    """``{root}/ledgers/available/readonly`` or a read-only bookie's node under it."""
    base = _join(root, LEDGERS, AVAILABLE, READONLY)
    return base if bookie_id is None else f"{base}/{bookie_id}"


def cookie_path(root: str, bookie_id: str | None = None) -> str:
    """``{root}/ledgers/cookies`` or the cookie of ``bookie_id``."""
    base = _join(root, LEDGERS, COOKIES)
    return base if bookie_id is None else f"{base}/{bookie_id}"


def _check_id(ledger_id: int, limit: int) -> None:
    if not isinstance(ledger_id, int) or isinstance(ledger_id, bool) or not 0 <= ledger_id <= limit:
        raise ValueError(f"ledger id {ledger_id!r} is outside 0..{limit}")


class LedgerLayout(enum.Enum):
    """Where ledger metadata nodes live; the value is BookKeeper's factory class recorded in the
    ``LAYOUT`` node (``factory_version`` beside it)."""

    HIERARCHICAL = "org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory"
    FLAT = "org.apache.bookkeeper.meta.FlatLedgerManagerFactory"

    @property
    def factory_version(self) -> int:
        """The manager version BookKeeper writes after the class name."""
        return 1


class LayoutFormatError(ValueError):
    """A ``LAYOUT`` node or a ``ledgerManagerFactoryClass`` value Magnetar cannot use."""


_LAYOUT_NAMES = {
    "hierarchical": LedgerLayout.HIERARCHICAL,
    "longhierarchical": LedgerLayout.HIERARCHICAL,
    "flat": LedgerLayout.FLAT,
    LedgerLayout.HIERARCHICAL.value.lower(): LedgerLayout.HIERARCHICAL,
    # BookKeeper's default class name: Magnetar's hierarchical layout is its long form for every id
    "org.apache.bookkeeper.meta.hierarchicalledgermanagerfactory": LedgerLayout.HIERARCHICAL,
    LedgerLayout.FLAT.value.lower(): LedgerLayout.FLAT,
}
_LAYOUT_FORMAT_VERSION = 2


def parse_layout_name(name: str) -> LedgerLayout:
    """The layout a ``ledgerManagerFactoryClass`` value names: ``hierarchical`` / ``flat`` or a
    BookKeeper factory class (``...HierarchicalLedgerManagerFactory`` and
    ``...LongHierarchicalLedgerManagerFactory`` both mean the long hierarchical layout,
    ``...FlatLedgerManagerFactory`` the flat one); case-insensitive. ``LayoutFormatError`` else."""
    layout = _LAYOUT_NAMES.get(name.strip().lower())
    if layout is None:
        raise LayoutFormatError(f"unknown ledger manager {name!r}: use hierarchical, flat or a BookKeeper "
                                f"factory class ({LedgerLayout.HIERARCHICAL.value}, {LedgerLayout.FLAT.value})")
    return layout


def layout_path(root: str) -> str:
    """``{root}/ledgers/LAYOUT``: the node recording the ledger layout of the cluster."""
    return _join(root, LEDGERS, LAYOUT)


def encode_layout(layout: LedgerLayout) -> bytes:
    """The ``LAYOUT`` node's data for ``layout`` (BookKeeper's LedgerLayout text, format 2)."""
    return f"{_LAYOUT_FORMAT_VERSION}\n{layout.value}:{layout.factory_version}\n".encode()


def decode_layout(data: bytes) -> LedgerLayout:
    """Parse a ``LAYOUT`` node. ``LayoutFormatError`` for another format version, a malformed
    text or a factory class Magnetar does not implement (the error names it)."""
    try:
        text = bytes(data).decode("ascii")
    except UnicodeDecodeError:
        raise LayoutFormatError("LAYOUT node is not ASCII text") from None
    lines = text.split("\n")
    if len(lines) < 2 or lines[0].strip() != str(_LAYOUT_FORMAT_VERSION):
        raise LayoutFormatError(f"LAYOUT node has format {lines[0].strip()!r}, expected {_LAYOUT_FORMAT_VERSION}")
    factory, sep, version = lines[1].strip().rpartition(":")
    if not sep or not version.isdigit():
        raise LayoutFormatError(f"LAYOUT line {lines[1]!r} is not factoryClass:version")
    for layout in LedgerLayout:
        if factory == layout.value:
            if int(version) != layout.factory_version:
                raise LayoutFormatError(f"LAYOUT names {factory} version {version}, expected {layout.factory_version}")
            return layout
    raise LayoutFormatError(f"LAYOUT names ledger manager {factory!r}, which Magnetar does not implement")


def layout_conflict(recorded: LedgerLayout, configured: LedgerLayout) -> str | None:
    """Why a process configured with ``configured`` must not use a cluster whose ``LAYOUT`` node
    records ``recorded``, or None when they agree."""
    if recorded is configured:
        return None
    return (f"the cluster's ledger layout is {recorded.name.lower()} ({recorded.value}) but "
            f"ledgerManagerFactoryClass is {configured.name.lower()}: set it to {recorded.name.lower()} "
            f"(ledgers of one layout are invisible in the other)")


def ledger_path(root: str, ledger_id: int, layout: LedgerLayout = LedgerLayout.HIERARCHICAL) -> str:
    """The metadata node of ``ledger_id`` in ``layout`` (long hierarchical by default; flat:
    ``{root}/ledgers/L{id:010d}``). ``ValueError`` outside 0..2**63-1."""
    _check_id(ledger_id, MAX_LEDGER_ID)
    if layout is LedgerLayout.FLAT:
        return _join(root, LEDGERS, f"{_PREFIX}{ledger_id:010d}")
    digits = f"{ledger_id:0{_DIGITS}d}"
    parts, at = [], 0
    for width in LEDGER_LEVELS:
        parts.append(digits[at : at + width])
        at += width
    parts[-1] = _PREFIX + parts[-1]
    return _join(root, LEDGERS, *parts)


def _parse_levels(names: Sequence[str], widths: Sequence[int], leaf_last: bool = True) -> int:
    if len(names) != len(widths):
        raise ValueError(f"expected {len(widths)} levels, got {len(names)}")
    digits = []
    for i, (name, width) in enumerate(zip(names, widths, strict=True)):
        if leaf_last and i == len(widths) - 1:
            if not name.startswith(_PREFIX):
                raise ValueError(f"leaf {name!r} lacks the {_PREFIX!r} prefix")
            name = name[len(_PREFIX) :]
        if len(name) != width or not (name.isascii() and name.isdigit()):
            raise ValueError(f"level {i} name {name!r} is not {width} digits")
        digits.append(name)
    return int("".join(digits))


def _relative(root: str, path: str) -> list[str]:
    prefix = ledgers_root(root) + "/"
    if not path.startswith(prefix):
        raise ValueError(f"{path!r} is not under {ledgers_root(root)!r}")
    return path[len(prefix) :].split("/")


def _flat_id(name: str) -> int | None:
    """The id a flat-layout child name stands for, or None when ``ledger_path`` would not write
    that name (not ``L`` + digits, fewer than 10 digits, extra leading zeros, above the max)."""
    digits = name[len(_PREFIX):] if name.startswith(_PREFIX) else ""
    if len(digits) < 10 or not (digits.isascii() and digits.isdigit()):
        return None
    ledger_id = int(digits)
    if ledger_id > MAX_LEDGER_ID or f"{ledger_id:010d}" != digits:
        return None
    return ledger_id


def flat_ledger_ids(children: Iterable[str]) -> list[int]:
    """The ledger ids among the children of the ledgers root in the flat layout, increasing;
    other names (``available``, ``LAYOUT``, ``idgen-long``, hierarchical level nodes) are dropped."""
    return sorted(i for i in map(_flat_id, children) if i is not None)


def ledger_id_from_path(root: str, path: str, layout: LedgerLayout = LedgerLayout.HIERARCHICAL) -> int:
    """Inverse of ``ledger_path``; ``ValueError`` for any path it would not produce."""
    if layout is LedgerLayout.FLAT:
        names = _relative(root, path)
        flat = _flat_id(names[0]) if len(names) == 1 else None
        if flat is None:
            raise ValueError(f"{path!r} is not a flat-layout ledger path")
        return flat
    ledger_id = _parse_levels(_relative(root, path), LEDGER_LEVELS)
    _check_id(ledger_id, MAX_LEDGER_ID)
    return ledger_id


_SHORT_LEVELS = (2, 4, 4)


def short_ledger_path(root: str, ledger_id: int) -> str:
    """BookKeeper's 10-digit hierarchical path ``{root}/ledgers/{2}/{4}/L{4}``.

    For reading BookKeeper clusters only; ``ValueError`` outside 0..10**10-1.
    """
    _check_id(ledger_id, 10**10 - 1)
    d = f"{ledger_id:010d}"
    return _join(root, LEDGERS, d[:2], d[2:6], _PREFIX + d[6:])


def short_ledger_id(root: str, path: str) -> int:
    """Inverse of ``short_ledger_path``; ``ValueError`` for any other path."""
    return _parse_levels(_relative(root, path), _SHORT_LEVELS)


def ledger_level_children(level: int, children: Iterable[str]) -> list[str]:
    """The children of a level-``level`` node (0 = the ledgers root) that are layout nodes,
    in increasing id order; other names (``available``, ``cookies``, ``idgen-long``, a stray
    ``tmp``) are dropped. At ``level == 4`` the children are ledger leaves ``L{4}``.

    Raises ``ValueError`` for a level outside 0..4.
    """
    if not 0 <= level < len(LEDGER_LEVELS):
        raise ValueError(f"level {level} is outside 0..{len(LEDGER_LEVELS) - 1}")
    width = LEDGER_LEVELS[level]
    leaf = level == len(LEDGER_LEVELS) - 1
    keep = []
    for name in children:
        digits = name[len(_PREFIX) :] if leaf and name.startswith(_PREFIX) else (None if leaf else name)
        if digits is not None and len(digits) == width and digits.isascii() and digits.isdigit():
            keep.append(name)
    # equal-width decimal strings (after an equal prefix) sort like their numbers
    keep.sort()
    if level == 0:  # the top level stops at 922 (2**63 - 1 has 19 digits starting 922)
        keep = [n for n in keep if int(n) <= MAX_LEDGER_ID // 10**16]
    return keep


def ledger_ids_in(parents: Sequence[str], leaves: Iterable[str]) -> list[int]:
    """The ledger ids under the level-4 node reached through ``parents`` (4 level names),
    given its children ``leaves``, in increasing order; non-ledger names are skipped.

    Raises ``ValueError`` if ``parents`` are not 4 valid level names.
    """
    if len(parents) != len(LEDGER_LEVELS) - 1:
        raise ValueError(f"expected {len(LEDGER_LEVELS) - 1} parent levels, got {len(parents)}")
    ids = []
    for leaf in ledger_level_children(len(LEDGER_LEVELS) - 1, leaves):
        ledger_id = _parse_levels([*parents, leaf], LEDGER_LEVELS)
        if ledger_id <= MAX_LEDGER_ID:
            ids.append(ledger_id)
    return ids


def id_range_of(parents: Sequence[str]) -> range:
    """The ids a partial path covers: ``parents`` are the level names below the ledgers root
    (0 to 5 of them; 5 names one ledger). The range is clipped to 0..2**63-1 (it may be empty
    for a top-level name above ``922``).

    ``id_range_of(["000"])`` is ``range(0, 10**16)``. Raises ``ValueError`` for invalid names.
    """
    n = len(parents)
    if n > len(LEDGER_LEVELS):
        raise ValueError(f"at most {len(LEDGER_LEVELS)} levels, got {n}")
    prefix = _parse_levels(parents, LEDGER_LEVELS[:n], leaf_last=n == len(LEDGER_LEVELS)) if n else 0
    span = 10 ** sum(LEDGER_LEVELS[n:])
    start = min(prefix * span, MAX_LEDGER_ID + 1)
    return range(start, min(prefix * span + span, MAX_LEDGER_ID + 1))
