"""The running Magnetar's version, as installed (``0.0.0+source`` from a source tree that was not)."""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version

__all__ = ["VERSION"]

try:
    VERSION: str = _dist_version("magnetar")
except PackageNotFoundError:  # running from a source tree that was not installed
    VERSION = "0.0.0+source"
