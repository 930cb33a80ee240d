"""The Pulsar codec's own frame errors, beside the shared ones.

Every problem the decoder can find in bytes from the network is a ``FrameError``; the shared
classes (``FrameError``, ``FrameTooLarge``, ``MalformedFrame``) live in ``protocols/_errors.py``
and are re-exported by ``protocols.pulsar``. A Pulsar ``FrameTooLarge`` counts the whole frame
(``totalSize + 4``) against the decoder's ``max_frame_size``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import FrameError

if TYPE_CHECKING:
    from .pulsar_api_pb2 import BaseCommand

__all__ = ["ChecksumMismatch", "MalformedBatch"]


class ChecksumMismatch(FrameError):
    """The CRC32-C of ``[metadataSize][metadata][payload]`` differs from the frame's.

    The frame is consumed and the decoder continues; ``command`` is set (Pulsar brokers
    answer a SEND with SEND_ERROR ChecksumError and keep the connection; clients ack a
    MESSAGE with validation error ChecksumMismatch).
    """

    command: BaseCommand | None


class MalformedBatch(FrameError):
    """A batched payload is not a sequence of ``[u32 size][SingleMessageMetadata][payload]``."""
