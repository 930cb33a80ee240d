"""Magnetar: a Pulsar-style messaging broker over a BookKeeper-style storage tier.

This package is the application: the ``magnetar`` command line (`magnetar.cli`) and the
composition of the services (`magnetar.stack`). Its `magnetar.common` subpackage holds the leaf
modules every other package may import (config loader, TLS, histograms, backoff, durations, the
HTTP server set-up, the admin REST client); nothing outside this package imports the rest of it.
"""

from magnetar.common.version import VERSION as __version__

__all__ = ["__version__"]
