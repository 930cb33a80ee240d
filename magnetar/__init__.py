"""Magnetar: a Pulsar-style messaging broker over a BookKeeper-style storage tier.

This package holds what composes the others: the ``magnetar`` command line (`magnetar.cli`) and
the dependency-free config loader (`magnetar.config`) that every component package may import.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version

try:
    __version__ = _dist_version("magnetar")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+source"
