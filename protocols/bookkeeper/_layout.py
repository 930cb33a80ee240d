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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = [
    "AVAILABLE",
    "COOKIES",
    "IDGEN",
    "INSTANCEID",
    "LAYOUT",
    "LEDGERS",
    "LEDGER_LEVELS",
    "MAX_LEDGER_ID",
    "READONLY",
    "UNDERREPLICATION",
    "available_path",
    "cookie_path",
    "id_range_of",
    "ledger_id_from_path",
    "ledger_ids_in",
    "ledger_level_children",
    "ledger_path",
    "ledgers_root",
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


def ledger_path(root: str, ledger_id: int) -> str:
    """The metadata node of ``ledger_id`` (long hierarchical). ``ValueError`` outside 0..2**63-1."""
    _check_id(ledger_id, MAX_LEDGER_ID)
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


def ledger_id_from_path(root: str, path: str) -> int:
    """Inverse of ``ledger_path``; ``ValueError`` for any path it would not produce."""
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
