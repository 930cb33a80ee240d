"""Typed errors raised by the Pulsar wire codec.

Every problem the decoder can find in bytes from the network is a :class:`FrameError`, so a
connection handler needs exactly one ``except`` clause around the codec. The subclasses say
whether the byte stream is still usable (see each docstring).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .pulsar_api_pb2 import BaseCommand


class FrameError(ValueError):
    """Base class: the bytes are not a valid Pulsar frame.

    ``command`` is the decoded BaseCommand when the frame got that far (so a broker can answer
    a bad SEND with SEND_ERROR for the right producer and sequence id), else ``None``.
    """

    def __init__(self, message: str, *, command: BaseCommand | None = None) -> None:
        super().__init__(message)
        self.command = command


class FrameTooLarge(FrameError):
    """A frame announces a size above the decoder's limit.

    The stream cannot be resynchronised: the decoder stays failed and the connection should
    be closed.
    """


class MalformedFrame(FrameError):
    """Sizes, magic numbers or protobuf contents are inconsistent.

    Raised for a frame whose extent is known and fully buffered, the frame is consumed and
    the decoder may continue; raised from the frame header (cmdSize larger than totalSize,
    totalSize too small) the decoder stays failed. Brokers close the connection either way.
    """


class ChecksumMismatch(FrameError):
    """The CRC32-C of ``[metadataSize][metadata][payload]`` differs from the frame's.

    The frame is consumed and the decoder continues; ``command`` is set (Pulsar brokers
    answer a SEND with SEND_ERROR ChecksumError and keep the connection; clients ack a
    MESSAGE with validation error ChecksumMismatch).
    """


class MalformedBatch(FrameError):
    """A batched payload is not a sequence of ``[u32 size][SingleMessageMetadata][payload]``."""
