"""`FrameDecoder.set_max_frame_size`: a connection starts with a small limit and raises it."""

from __future__ import annotations

import pytest

from protocols.pulsar import FrameDecoder, FrameTooLarge, encode_command, make_command


def _lookup(size: int) -> bytes:
    """A LOOKUP frame of about ``size`` bytes."""
    return encode_command(make_command("LOOKUP", topic="t" * size, request_id=1))


def test_raised_limit_applies_to_a_frame_already_buffered() -> None:
    decoder = FrameDecoder(1024)
    small, big = _lookup(100), _lookup(10_000)
    decoder.feed(small + big)
    assert decoder.next_frame() is not None
    decoder.set_max_frame_size(64 * 1024)
    frame = decoder.next_frame()
    assert frame is not None and len(frame.command.lookupTopic.topic) == 10_000


def test_small_limit_fails_at_the_header() -> None:
    decoder = FrameDecoder(1024)
    decoder.feed(_lookup(10_000)[:8])  # only the sizes have arrived
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


@pytest.mark.parametrize("bad", [7, 0x0E01_0000])
def test_out_of_range_limit_is_refused_and_kept(bad: int) -> None:
    decoder = FrameDecoder(1024)
    with pytest.raises(ValueError, match="max_frame_size"):
        decoder.set_max_frame_size(bad)
    assert decoder.max_frame_size == 1024
    with pytest.raises(ValueError, match="max_frame_size"):
        FrameDecoder(bad)
