"""The tier's exceptions: every one is a `TierError` whose message names the store and object."""

from __future__ import annotations

__all__ = ["ObjectNotFound", "OffloadError", "TierError", "TierUnavailable"]


class TierError(Exception):
    """Base of every tiered-storage failure."""


class TierUnavailable(TierError):
    """The object store could not be reached or refused the request (down, unreachable, wrong
    credentials, missing bucket). Retrying later may succeed; nothing was changed by the call."""


class ObjectNotFound(TierError):
    """The object does not exist in the store."""


class OffloadError(TierError):
    """Offloading one ledger failed; the message says which ledger, where to and why. Whatever was
    written of it was removed again (or will be, by the next attempt: its uid is recorded)."""
