"""Where ledger and bookie records live in the metadata store (pure path arithmetic), in the three
layouts of BookKeeper's ZooKeeper ledger managers (``LedgerLayout``):

* ``HIERARCHICAL`` (BookKeeper's ``HierarchicalLedgerManagerFactory``, its default): a ledger id
  below ``HYBRID_SPLIT`` (2**31 - 1, Java's Integer.MAX_VALUE) is written as 10 zero-padded
  digits split 2/4/4, the last level prefixed with ``L``; a larger one as in the long layout::

      id 1           -> {root}/ledgers/00/0000/L0001
      id 2**32 + 5   -> {root}/ledgers/000/0000/0004/2949/L6301

* ``LONG_HIERARCHICAL`` (``LongHierarchicalLedgerManagerFactory``): every id as 19 digits split
  3/4/4/4/4 (``{root}/ledgers/000/0000/0000/0000/L0001``).
* ``FLAT`` (``FlatLedgerManagerFactory``): every ledger a child of the ledgers root named ``L`` +
  the id in at least 10 digits (``{root}/ledgers/L0000000001``), listed with one ``children``
  call; for few ledgers (the child list of one znode must fit in a ZooKeeper packet).

No znode of a hierarchical tree has more than 10,000 children (100 / 1,000 at the top). Listing:
GC and the auditor walk each tree (``trees``) level by level. ``ledger_level_children`` keeps the
children of a level that are layout nodes of that tree (dropping ``available``, ``cookies``,
``idgen``, ``LAYOUT`` ... and the other tree's nodes under the ledgers root) in id order,
``ledger_ids_in`` turns the leaf names under a last-level node into ids, and ``id_range_of`` gives
the id range a partial path covers, so a scan can resume or stop range by range.

The layout in use is recorded in the ``{root}/ledgers/LAYOUT`` node as BookKeeper's
``LedgerLayout`` text, byte for byte: the layout-format version, a newline, then
``factoryClass:managerVersion`` (no newline after it)::

    2
    org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1

The first client or bookie to start writes it; a process configured with a layout refuses a
cluster recording another (``layout_conflict``), because the layouts cannot see each other's
ledgers, and one configured with none follows the record, as BookKeeper's ``zk://`` URIs do.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

__all__ = [
    "AVAILABLE",
    "COOKIES",
    "IDGEN",
    "HYBRID_SPLIT",
    "LONG_LEVELS",
    "SHORT_LEVELS",
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
    "level_name",
    "layout_conflict",
    "layout_path",
    "ledger_path",
    "ledgers_root",
    "parse_layout_name",
    "readonly_path",
    "short_ledger_id",
    "short_ledger_path",
    "tree_of",
    "trees",
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
LONG_LEVELS = (3, 4, 4, 4, 4)
"""Digits per level of the long hierarchical tree; the last level carries the ``L`` prefix."""
SHORT_LEVELS = (2, 4, 4)
"""Digits per level of the 10-digit hierarchical tree (BookKeeper's legacy hierarchical layout)."""
LEDGER_LEVELS = LONG_LEVELS
HYBRID_SPLIT = 2**31 - 1
"""In the HIERARCHICAL layout, ids below this take the short tree and the others the long one
(BookKeeper's ``StringUtils.getHybridHierarchicalLedgerPath``)."""
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

    HIERARCHICAL = "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory"
    LONG_HIERARCHICAL = "org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory"
    FLAT = "org.apache.bookkeeper.meta.FlatLedgerManagerFactory"

    @property
    def factory_version(self) -> int:
        """The manager version BookKeeper writes after the class name (1 for all three)."""
        return 1

    @property
    def config_name(self) -> str:
        """The ``ledgerManagerType`` name BookKeeper gives the layout (``hierarchical``,
        ``longhierarchical``, ``flat``)."""
        return self.name.lower().replace("_", "")


class LayoutFormatError(ValueError):
    """A ``LAYOUT`` node or a ``ledgerManagerFactoryClass`` value Magnetar cannot use."""


_LAYOUT_NAMES = {
    **{layout.config_name: layout for layout in LedgerLayout},
    **{layout.value.lower(): layout for layout in LedgerLayout},
}
_LAYOUT_FORMAT_VERSION = 2


def parse_layout_name(name: str) -> LedgerLayout | None:
    """The layout a ``ledgerManagerFactoryClass`` value names: ``hierarchical`` /
    ``longhierarchical`` / ``flat`` (BookKeeper's ``ledgerManagerType`` names) or the factory
    class, case-insensitive; None for an empty value (follow the cluster's ``LAYOUT``).
    ``LayoutFormatError`` for anything else."""
    if not name.strip():
        return None
    layout = _LAYOUT_NAMES.get(name.strip().lower())
    if layout is None:
        raise LayoutFormatError(
            f"unknown ledger manager {name!r}: use hierarchical, longhierarchical, flat or a "
            f"BookKeeper factory class ({', '.join(x.value for x in LedgerLayout)})"
        )
    return layout


def layout_path(root: str) -> str:
    """``{root}/ledgers/LAYOUT``: the node recording the ledger layout of the cluster."""
    return _join(root, LEDGERS, LAYOUT)


def encode_layout(layout: LedgerLayout) -> bytes:
    """The ``LAYOUT`` node's data for ``layout``: BookKeeper's LedgerLayout text, format 2, the
    bytes ``LedgerLayout.serialize`` writes (no trailing newline)."""
    return f"{_LAYOUT_FORMAT_VERSION}\n{layout.value}:{layout.factory_version}".encode()


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


def layout_conflict(recorded: LedgerLayout, configured: LedgerLayout | None) -> str | None:
    """Why a process configured with ``configured`` must not use a cluster whose ``LAYOUT`` node
    records ``recorded``, or None when they agree (or nothing is configured)."""
    if configured is None or recorded is configured:
        return None
    return (
        f"the cluster's ledger layout is {recorded.config_name} ({recorded.value}) but "
        f"ledgerManagerFactoryClass is {configured.config_name}: set it to {recorded.config_name} or leave "
        f"it empty (ledgers of one layout are invisible in the other)"
    )


def _tree_path(root: str, ledger_id: int, levels: Sequence[int]) -> str:
    digits = f"{ledger_id:0{sum(levels)}d}"
    parts, at = [], 0
    for width in levels:
        parts.append(digits[at : at + width])
        at += width
    parts[-1] = _PREFIX + parts[-1]
    return _join(root, LEDGERS, *parts)


def tree_of(ledger_id: int, layout: LedgerLayout) -> tuple[int, ...]:
    """The digits per level of the tree holding ``ledger_id`` in a hierarchical ``layout``."""
    if layout is LedgerLayout.HIERARCHICAL and ledger_id < HYBRID_SPLIT:
        return SHORT_LEVELS
    return LONG_LEVELS


def trees(layout: LedgerLayout) -> list[tuple[tuple[int, ...], range]]:
    """The trees of a hierarchical ``layout`` in increasing id order: (digits per level, the ids
    it holds). Empty for FLAT."""
    if layout is LedgerLayout.HIERARCHICAL:
        return [(SHORT_LEVELS, range(HYBRID_SPLIT)), (LONG_LEVELS, range(HYBRID_SPLIT, MAX_LEDGER_ID + 1))]
    if layout is LedgerLayout.LONG_HIERARCHICAL:
        return [(LONG_LEVELS, range(MAX_LEDGER_ID + 1))]
    return []


def ledger_path(root: str, ledger_id: int, layout: LedgerLayout = LedgerLayout.HIERARCHICAL) -> str:
    """The metadata node of ``ledger_id`` in ``layout`` (see the module docstring).
    ``ValueError`` outside 0..2**63-1."""
    _check_id(ledger_id, MAX_LEDGER_ID)
    if layout is LedgerLayout.FLAT:
        return _join(root, LEDGERS, f"{_PREFIX}{ledger_id:010d}")
    return _tree_path(root, ledger_id, tree_of(ledger_id, layout))


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
    digits = name[len(_PREFIX) :] if name.startswith(_PREFIX) else ""
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
    names = _relative(root, path)
    if layout is LedgerLayout.FLAT:
        flat = _flat_id(names[0]) if len(names) == 1 else None
        if flat is None:
            raise ValueError(f"{path!r} is not a flat-layout ledger path")
        return flat
    levels = SHORT_LEVELS if layout is LedgerLayout.HIERARCHICAL and len(names) == len(SHORT_LEVELS) else LONG_LEVELS
    ledger_id = _parse_levels(names, levels)
    _check_id(ledger_id, MAX_LEDGER_ID)
    if tree_of(ledger_id, layout) != levels:
        raise ValueError(f"{path!r} is not where {layout.config_name} keeps ledger {ledger_id}")
    return ledger_id


def short_ledger_path(root: str, ledger_id: int) -> str:
    """BookKeeper's 10-digit hierarchical path ``{root}/ledgers/{2}/{4}/L{4}``.

    For reading BookKeeper clusters only; ``ValueError`` outside 0..10**10-1.
    """
    _check_id(ledger_id, 10**10 - 1)
    d = f"{ledger_id:010d}"
    return _join(root, LEDGERS, d[:2], d[2:6], _PREFIX + d[6:])


def short_ledger_id(root: str, path: str) -> int:
    """Inverse of ``short_ledger_path``; ``ValueError`` for any other path."""
    return _parse_levels(_relative(root, path), SHORT_LEVELS)


def ledger_level_children(level: int, children: Iterable[str], levels: Sequence[int] = LONG_LEVELS) -> list[str]:
    """The children of a level-``level`` node (0 = the ledgers root) of the tree with ``levels``
    digits per level that are nodes of that tree, in increasing id order; other names
    (``available``, ``cookies``, ``idgen``, a stray ``tmp``, the other tree's nodes) are dropped.
    At the last level the children are ledger leaves ``L{digits}``.

    Raises ``ValueError`` for a level outside the tree.
    """
    if not 0 <= level < len(levels):
        raise ValueError(f"level {level} is outside 0..{len(levels) - 1}")
    width = levels[level]
    leaf = level == len(levels) - 1
    keep = []
    for name in children:
        digits = name[len(_PREFIX) :] if leaf and name.startswith(_PREFIX) else (None if leaf else name)
        if digits is not None and len(digits) == width and digits.isascii() and digits.isdigit():
            keep.append(name)
    # equal-width decimal strings (after an equal prefix) sort like their numbers
    keep.sort()
    if level == 0:  # the top level stops at the one holding 2**63 - 1
        top = MAX_LEDGER_ID // 10 ** sum(levels[1:])
        keep = [n for n in keep if int(n) <= top]
    return keep


def ledger_ids_in(parents: Sequence[str], leaves: Iterable[str], levels: Sequence[int] = LONG_LEVELS) -> list[int]:
    """The ledger ids under the last-level node reached through ``parents`` (one name per level
    above the leaves) of the tree with ``levels``, given its children ``leaves``, in increasing
    order; non-ledger names are skipped.

    Raises ``ValueError`` if ``parents`` are not valid level names.
    """
    if len(parents) != len(levels) - 1:
        raise ValueError(f"expected {len(levels) - 1} parent levels, got {len(parents)}")
    ids = []
    for leaf in ledger_level_children(len(levels) - 1, leaves, levels):
        ledger_id = _parse_levels([*parents, leaf], levels)
        if ledger_id <= MAX_LEDGER_ID:
            ids.append(ledger_id)
    return ids


def id_range_of(parents: Sequence[str], levels: Sequence[int] = LONG_LEVELS) -> range:
    """The ids a partial path of the tree with ``levels`` covers: ``parents`` are the level names
    below the ledgers root (none up to one per level; all of them name one ledger). The range is
    clipped to 0..2**63-1 (it may be empty for a top-level name above the largest id).

    ``id_range_of(["000"])`` is ``range(0, 10**16)``. Raises ``ValueError`` for invalid names.
    """
    n = len(parents)
    if n > len(levels):
        raise ValueError(f"at most {len(levels)} levels, got {n}")
    prefix = _parse_levels(parents, levels[:n], leaf_last=n == len(levels)) if n else 0
    span = 10 ** sum(levels[n:])
    start = min(prefix * span, MAX_LEDGER_ID + 1)
    return range(start, min(prefix * span + span, MAX_LEDGER_ID + 1))


def level_name(ledger_id: int, level: int, levels: Sequence[int] = LONG_LEVELS) -> str:
    """The name of the level-``level`` node on the path of ``ledger_id`` in the tree with ``levels``
    (the leaf with its ``L`` prefix)."""
    return _tree_path("", ledger_id, levels).split("/")[2 + level]
