"""``store_url``: one URL per backend, so the contract tests run against each of them."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("embedded", id="embedded"),
    pytest.param("zk", id="zk", marks=pytest.mark.slow),
]


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store for this test on the parametrised backend."""
    if request.param == "memory":
        return f"memory://test-{uuid.uuid4().hex}"
    if request.param == "embedded":
        return f"embedded://{tmp_path / 'meta'}"
    return str(request.getfixturevalue("zk_url"))
