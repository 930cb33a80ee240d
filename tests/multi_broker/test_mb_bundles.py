"""Namespace bundle arithmetic (pure): Pulsar's boundaries, CRC-32 topic hashing, splits."""

from __future__ import annotations

import zlib

import pytest

from broker.resources._bundles import (
    FULL_UPPER,
    BundleRange,
    boundaries_of,
    bundle_for,
    bundle_hash,
    bundles_of,
    default_boundaries,
    parse_bundle,
    policies_bundles,
    split_boundaries,
)


def test_default_four_bundles_match_pulsar() -> None:
    assert policies_bundles(4) == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
        "numBundles": 4,
    }
    assert default_boundaries(1) == [0, FULL_UPPER]
    with pytest.raises(ValueError, match="between 1"):
        default_boundaries(0)


def test_topic_hash_is_crc32_of_the_full_name() -> None:
    name = "persistent://public/default/my-topic"
    assert bundle_hash(name) == zlib.crc32(name.encode()) & 0xFFFFFFFF


def test_every_hash_has_exactly_one_bundle() -> None:
    b = default_boundaries(4)
    ranges = bundles_of(b)
    for h in (0, 1, 0x3FFFFFFF, 0x40000000, 0xBFFFFFFF, 0xC0000000, FULL_UPPER - 1, FULL_UPPER):
        assert sum(r.contains(h) for r in ranges) == 1, hex(h)
    for i in range(200):
        topic = f"persistent://t/ns/topic-{i}"
        r = bundle_for(b, topic)
        assert r.contains(bundle_hash(topic)) and r in ranges


def test_names_parse_back_and_bad_names_are_refused() -> None:
    r = BundleRange(0x40000000, 0x80000000)
    assert r.name == "0x40000000_0x80000000"
    assert parse_bundle(r.name) == r
    for bad in ("0x1", "40000000_80000000", "0x80000000_0x40000000", "0x0_0x100000000"):
        with pytest.raises(ValueError):
            parse_bundle(bad)


def test_split_halves_a_bundle_and_keeps_others() -> None:
    b = default_boundaries(4)
    after = split_boundaries(b, BundleRange(0x40000000, 0x80000000))
    assert after == [0, 0x40000000, 0x60000000, 0x80000000, 0xC0000000, FULL_UPPER]
    with pytest.raises(ValueError, match="not a bundle"):
        split_boundaries(after, BundleRange(0x40000000, 0x80000000))


def test_policies_without_or_with_bad_bundles() -> None:
    assert boundaries_of({}) == [0, FULL_UPPER]
    assert boundaries_of({"bundles": {"numBundles": 2}}) == [0, 0x80000000, FULL_UPPER]
    with pytest.raises(ValueError):
        boundaries_of({"bundles": {"boundaries": ["0x00000010", "0xffffffff"]}})
    with pytest.raises(ValueError):
        boundaries_of({"bundles": {"boundaries": ["0x00000000", "0x50000000", "0x40000000", "0xffffffff"]}})
