"""The frame errors every wire format's decoder raises (re-exported by `protocols.pulsar` and
`protocols.bookkeeper`).

Every problem a decoder finds in bytes from the network is a `FrameError`, so a connection
handler needs exactly one ``except`` clause around its codec; the subclasses say whether the
byte stream is still usable. A `FrameError` is a ValueError: the bytes are not a valid value of
the format. Formats add their own subclasses next to their decoder (Pulsar's checksum and batch
errors in ``protocols/pulsar/_errors.py``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["FrameError", "FrameTooLarge", "MalformedFrame"]


class FrameError(ValueError):
    """Base class: the bytes are not a valid frame of the protocol.

    ``command`` is the decoded command when the frame got that far (Pulsar's ``BaseCommand``, so
    that a broker can answer a bad SEND with SEND_ERROR for the right producer and sequence id),
    else ``None``; the bookie protocol never sets it. It is typed ``Any`` because this module is
    shared by formats whose messages have nothing in common.
    """

    def __init__(self, message: str, *, command: Any = None) -> None:
        super().__init__(message)
        self.command = command


class FrameTooLarge(FrameError):
    """A frame announces a length above the decoder's limit.

    ``size`` is the declared length and ``limit`` the decoder's maximum, both counted as that
    protocol's decoder counts them. The stream cannot be resynchronised: the decoder stays failed
    and the connection should be closed.
    """

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class MalformedFrame(FrameError):
    """A frame's sizes, magic numbers or protobuf contents are inconsistent (or a message cannot
    be encoded because a required field is unset).

    Raised for a frame whose extent is known and fully received, the frame is consumed and the
    decoder may continue; raised from a frame's header (Pulsar: cmdSize larger than totalSize,
    totalSize too small) the decoder stays failed. Servers close the connection either way.
    """
