"""Neither the broker's nor the bookie's ``/metrics`` carries ``*_created`` series (epoch times
prometheus-client adds to counters and histograms): Pulsar and BookKeeper export none. Each
process is checked on its own, since the switch is process-wide."""

from __future__ import annotations

import subprocess
import sys

import pytest

_BROKER = """
from broker.metrics import BrokerMetrics
from managed_ledger.metrics import ManagedLedgerMetrics
from bk_client.metrics import ClientMetrics
m = BrokerMetrics()
ml, bk = ManagedLedgerMetrics(), ClientMetrics()
m.extra_registries.extend([ml.registry, bk.registry])
print(m.render().decode())
"""

_BOOKIE = """
from prometheus_client import CollectorRegistry, generate_latest
from bookie.metrics import BookieServerMetrics, GcMetrics, JournalMetrics, StorageMetrics
registry = CollectorRegistry()
for cls in (JournalMetrics, StorageMetrics, BookieServerMetrics, GcMetrics):
    cls(registry)
print(generate_latest(registry).decode())
"""


@pytest.mark.parametrize("script", [_BROKER, _BOOKIE], ids=["broker", "bookie"])
def test_no_created_series(script: str) -> None:
    text = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert any(line.split("{")[0].split(" ")[0].endswith("_total") for line in samples), text[:2000]
    assert not [line for line in samples if line.split("{")[0].split(" ")[0].endswith("_created")]
