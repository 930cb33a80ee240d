"""Real bookie processes for the client's integration tests and the benchmark: the shared helper
lives in ``tests.support.bookies``; these names stay importable from here for ``bench/``."""

from __future__ import annotations

from tests.support.bookies import REPO, RealBookie, RealCluster

__all__ = ["REPO", "RealBookie", "RealCluster"]
