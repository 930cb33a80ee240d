"""Send receipts of the official client, collected from its callback thread, for tests that
produce while brokers or bookies fail and then check that every receipted message is there."""

from __future__ import annotations

import threading
import time

import pulsar

__all__ = ["ReceiptLog", "produce_until"]


class ReceiptLog:
    """Payloads whose send the broker acknowledged (from the client's callback thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ok: list[bytes] = []
        self.failed: list[str] = []

    def callback(self, payload: bytes):
        def done(res: pulsar.Result, _msg_id: object) -> None:
            with self.lock:
                if res == pulsar.Result.Ok:
                    self.ok.append(payload)
                else:
                    self.failed.append(f"{payload!r}: {res}")

        return done

    def count(self) -> int:
        """Receipts so far."""
        with self.lock:
            return len(self.ok)


def produce_until(
    producer: pulsar.Producer, log: ReceiptLog, prefix: str, receipts: int, deadline_s: float = 60.0
) -> int:
    """Send ``prefix-i`` asynchronously until ``receipts`` receipts arrived; the number sent."""
    i = 0
    deadline = time.monotonic() + deadline_s
    while log.count() < receipts and time.monotonic() < deadline:
        payload = f"{prefix}-{i}".encode()
        producer.send_async(payload, log.callback(payload))
        i += 1
        if i % 20 == 0:
            time.sleep(0.01)
    return i
