"""Namespace bundles: the hash ranges a namespace's topics are split into (pure, no I/O).

A namespace's 32-bit hash space ``[0x00000000, 0xffffffff]`` is cut at its *boundaries* (stored in
the namespace's Policies as ``{"bundles": {"boundaries": [...], "numBundles": N}}``, as Pulsar
stores them) into N bundles; bundle ``i`` is ``[b[i], b[i+1])``, the last one also holding
``0xffffffff``. A topic belongs to the bundle holding the hash of its full name
(``persistent://tenant/ns/local[-partition-N]``, so partitions spread over bundles).

Hash: Pulsar's broker builds its bundle factory with CRC-32 (the zlib / IEEE polynomial) of the
topic name's UTF-8 bytes, unsigned, and so does Magnetar: a topic lands in the same bundle
here as in Pulsar. (Murmur3_32 is Pulsar's key hash for Key_Shared and routing, not the bundle
hash.)

Bundles are named as in Pulsar's admin API: ``0x00000000_0x40000000`` (lower_upper, 8 lowercase
hex digits each). Splitting a bundle in halves (Pulsar's ``range_equally_divide``) adds its
midpoint as a boundary.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FULL_UPPER",
    "MAX_BUNDLES",
    "BundleRange",
    "bundle_hash",
    "default_boundaries",
    "boundaries_of",
    "bundles_of",
    "bundle_for",
    "parse_bundle",
    "split_boundaries",
    "policies_bundles",
]

FULL_UPPER = 0xFFFFFFFF
MAX_BUNDLES = 1024
"""The most bundles a namespace may have (Pulsar's ``loadBalancerNamespaceMaximumBundles`` default
is 128; a hard cap keeps every per-namespace list bounded)."""


@dataclass(frozen=True, order=True)
class BundleRange:
    """One bundle ``[lower, upper)`` of a namespace's hash space (``upper`` inclusive when it is
    `FULL_UPPER`)."""

    lower: int
    upper: int

    @property
    def name(self) -> str:
        """Pulsar's name of the range: ``0x00000000_0x40000000``."""
        return f"0x{self.lower:08x}_0x{self.upper:08x}"

    def contains(self, h: int) -> bool:
        """Whether hash ``h`` falls in this bundle."""
        return self.lower <= h < self.upper or (h == self.upper == FULL_UPPER)

    def __str__(self) -> str:
        return self.name


def bundle_hash(topic: str) -> int:
    """The bundle hash of a full topic name (CRC-32 of its UTF-8 bytes, unsigned)."""
    return zlib.crc32(topic.encode()) & 0xFFFFFFFF


def default_boundaries(n: int) -> list[int]:
    """Boundaries of ``n`` equal bundles, as Pulsar computes ``defaultNumberOfNamespaceBundles``.

    Raises `ValueError` unless ``1 <= n <= MAX_BUNDLES``."""
    if not 1 <= n <= MAX_BUNDLES:
        raise ValueError(f"the number of bundles must be between 1 and {MAX_BUNDLES}, got {n}")
    step = (FULL_UPPER + 1) // n
    return [i * step for i in range(n)] + [FULL_UPPER]


def policies_bundles(n: int) -> dict[str, Any]:
    """The ``bundles`` value of a namespace's Policies for ``n`` equal bundles."""
    b = default_boundaries(n)
    return {"boundaries": [f"0x{x:08x}" for x in b], "numBundles": n}


def _parse_hex(value: object) -> int:
    if not isinstance(value, str) or not value.lower().startswith("0x"):
        raise ValueError(f"a bundle boundary must be a 0x-prefixed hex string, got {value!r}")
    x = int(value, 16)
    if not 0 <= x <= FULL_UPPER:
        raise ValueError(f"bundle boundary {value} is outside 0x00000000..0xffffffff")
    return x


def boundaries_of(policies: Mapping[str, Any] | None) -> list[int]:
    """The boundaries stored in a namespace's Policies (``numBundles`` equal ones when only that
    is stored, one bundle when nothing is).

    Raises `ValueError` for boundaries that are not strictly increasing from 0 to 0xffffffff."""
    bundles = (policies or {}).get("bundles") or {}
    raw = bundles.get("boundaries") if isinstance(bundles, Mapping) else None
    if not raw:
        # pulsar-admin's ``namespaces create --bundles N`` sends only ``numBundles``
        n = bundles.get("numBundles") if isinstance(bundles, Mapping) else None
        return default_boundaries(n) if isinstance(n, int) and not isinstance(n, bool) else [0, FULL_UPPER]
    b = [_parse_hex(x) for x in raw]
    if len(b) < 2 or b[0] != 0 or b[-1] != FULL_UPPER or any(x >= y for x, y in itertools.pairwise(b)):
        raise ValueError(f"bundle boundaries must rise strictly from 0x00000000 to 0xffffffff: {raw}")
    return b


def bundles_of(boundaries: Sequence[int]) -> list[BundleRange]:
    """The bundles between consecutive boundaries, in order."""
    return [BundleRange(lo, hi) for lo, hi in itertools.pairwise(boundaries)]


def bundle_for(boundaries: Sequence[int], topic: str) -> BundleRange:
    """The bundle of ``topic`` (a full topic name) among ``boundaries``."""
    h = bundle_hash(topic)
    lo, hi = 0, len(boundaries) - 1
    # binary search for the last boundary <= h (the final boundary is inclusive)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if boundaries[mid] <= h:
            lo = mid
        else:
            hi = mid
    return BundleRange(boundaries[lo], boundaries[lo + 1])


def parse_bundle(name: str) -> BundleRange:
    """A bundle from its name ``0xLLLLLLLL_0xUUUUUUUU``; `ValueError` if malformed."""
    parts = name.split("_")
    if len(parts) != 2:
        raise ValueError(f"a bundle is named 0xLOWER_0xUPPER, got {name!r}")
    lower, upper = _parse_hex(parts[0]), _parse_hex(parts[1])
    if lower >= upper:
        raise ValueError(f"bundle {name}: lower bound must be below the upper bound")
    return BundleRange(lower, upper)


def split_boundaries(boundaries: Sequence[int], bundle: BundleRange) -> list[int]:
    """``boundaries`` with ``bundle`` split in two equal halves (Pulsar's ``range_equally_divide``).

    Raises `ValueError` when ``bundle`` is not one of the namespace's bundles, is too small to
    split, or the namespace already has `MAX_BUNDLES` bundles."""
    if bundle not in bundles_of(boundaries):
        raise ValueError(f"bundle {bundle} is not a bundle of this namespace")
    if len(boundaries) - 1 >= MAX_BUNDLES:
        raise ValueError(f"the namespace already has {MAX_BUNDLES} bundles")
    if bundle.upper - bundle.lower < 2:
        raise ValueError(f"bundle {bundle} is too small to split")
    mid = bundle.lower + (bundle.upper - bundle.lower) // 2
    return sorted({*boundaries, mid})
