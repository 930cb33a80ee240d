"""Real bookie processes for the crash tests, and a writer that records what was acknowledged."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

from protocols.bookkeeper import StatusCode, add_request, encode_entry, read_request
from tests.support.bookie_server import KEY, SyncClient
from tests.support.bookies import RealBookie


def payload(ledger: int, entry: int, size: int = 0) -> bytes:
    """Deterministic entry bytes, digest-framed: a body of ``size`` bytes, or of 100 to ~3000."""
    rnd = random.Random(ledger * 1_000_003 + entry)
    body = rnd.randbytes(size or rnd.randint(100, 3000))
    return encode_entry(ledger, entry, entry - 1, 0, body)


class BookieProcess(RealBookie):
    """``magnetar bookie`` with the fixed id ``crash-bookie``, an embedded metadata store and its
    data under ``base``, logging at INFO (tests look for the recovery messages in ``log``)."""

    def __init__(self, base: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        super().__init__(
            base, f"embedded://{base / 'meta'}", extra, bookie_id="crash-bookie", log_level="INFO", env=env
        )


@dataclass
class Writer:
    """Adds entries ``0, 1, ...`` to ``ledger`` with ``window`` in flight, in a thread, until the
    connection breaks or `stop` is called; records what was acknowledged and what was sent.
    ``size`` fixes the body size of every entry (0: 100 to ~3000 bytes)."""

    port: int
    ledger: int
    window: int = 64
    size: int = 0
    acked: set[int] = field(default_factory=set)
    errors: dict[int, int] = field(default_factory=dict)
    sent: int = 0
    stopped: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> Writer:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join(30)

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join(30)

    def _run(self) -> None:
        client = SyncClient(self.port)
        try:
            in_flight = 0
            while True:
                while in_flight < self.window and not self.stopped.is_set():
                    e = self.sent
                    client.send(add_request(e + 1, self.ledger, e, KEY, payload(self.ledger, e, self.size)))
                    self.sent += 1
                    in_flight += 1
                if in_flight == 0:
                    return
                resp = client.next_response()
                if resp is None:
                    return
                in_flight -= 1
                e = resp.addResponse.entryId
                if resp.status == StatusCode.EOK and resp.addResponse.status == StatusCode.EOK:
                    self.acked.add(e)
                else:
                    self.errors[e] = resp.addResponse.status
        except OSError:
            return
        finally:
            client.close()


def read_back(port: int, ledger: int, entries: range) -> dict[int, tuple[int, bytes]]:
    """{entry: (status, body)} for every entry id of the range (pipelined reads)."""
    out: dict[int, tuple[int, bytes]] = {}
    client = SyncClient(port, timeout=30)
    try:
        ids = list(entries)
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            client.send(*[read_request(e + 1, ledger, e) for e in chunk])
            for _ in chunk:
                resp = client.next_response()
                assert resp is not None, "bookie closed the connection during reads"
                out[resp.readResponse.entryId] = (resp.status, resp.readResponse.body)
    finally:
        client.close()
    return out


def check_round(port: int, ledger: int, writer: Writer) -> None:
    """Every acknowledged entry reads back byte for byte; an unacknowledged one is absent or whole."""
    got = read_back(port, ledger, range(writer.sent))
    for e in range(writer.sent):
        status, body = got[e]
        if e in writer.acked:
            assert status == StatusCode.EOK, f"acknowledged entry {ledger}/{e} lost: status {status}"
            assert body == payload(ledger, e, writer.size), f"acknowledged entry {ledger}/{e} differs"
        elif status == StatusCode.EOK:
            assert body == payload(ledger, e, writer.size), f"unacknowledged entry {ledger}/{e} is half-visible"
        else:
            assert status in (StatusCode.ENOENTRY, StatusCode.ENOLEDGER), status
