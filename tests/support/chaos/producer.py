"""A producer as its own process, so that the chaos run can SIGKILL the application too, and the
harness-side handle that starts, pauses, kills and restarts it.

The process (``python -m tests.support.chaos.producer ...``) sends ``--rate`` messages per second
with explicit sequence ids from ``--start``, named ``--name``, in groups of ``--batch`` (with
batching on, one group is one batch: ``batching_max_messages`` = batch, a long publish delay,
groups sent back to back and always completed before a pause, so a re-sent group has the
original batch boundaries, which exactly-once over batches needs). ``send_timeout_millis=0``:
the client never gives up; it re-sends what is pending after every reconnect, with the same
sequence ids. It prints one line per event on stdout (flushed; a SIGKILL may cut the last one):

    READY <last_sequence_id from the broker>
    S <first seq> <last seq>          a group handed to send_async
    R <seq> <ledger>:<entry>:<batch>  the send callback said Ok
    F <seq> <result>                  the send callback reported a failure
    P <next seq>                      paused: everything sent so far has been answered

and reads ``pause``, ``resume`` and ``stop`` lines on stdin.

A restarted producer (same name) resumes at the start of the group after the last receipted
sequence id: what the killed process sent without a receipt is sent again, and deduplication
must drop the copies that were stored.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProducerSpec", "ProducerAgent", "payload_key"]


def payload_key(data: bytes) -> tuple[str, int]:
    """The (producer, sequence id) a chaos payload carries: ``b"name|seq|padding"``."""
    name, seq, _ = data.split(b"|", 2)
    return name.decode(), int(seq)


# --- the producer process -----------------------------------------------------------------------


def _main(argv: list[str]) -> int:
    import pulsar

    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--paused", action="store_true")
    ap.add_argument("--client-log", default="/dev/null")
    args = ap.parse_args(argv)

    out_lock = threading.Lock()

    def emit(line: str) -> None:
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    # the client's own log must not share stdout with the event lines
    client = pulsar.Client(
        args.url, operation_timeout_seconds=30, logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, args.client_log)
    )
    conf: dict[str, object] = {"batching_enabled": False}
    if args.batch > 1:
        conf = {
            "batching_enabled": True,
            "batching_max_messages": args.batch,
            "batching_max_publish_delay_ms": 1000,
            "batching_max_allowed_size_in_bytes": 4 * 1024 * 1024,
        }
    producer = None
    while producer is None:  # the broker may be down when the process starts
        try:
            producer = client.create_producer(
                args.topic,
                producer_name=args.name,
                send_timeout_millis=0,
                block_if_queue_full=True,
                max_pending_messages=2000,
                **conf,
            )
        except pulsar.PulsarException as exc:
            emit(f"# create_producer: {exc}")
            time.sleep(0.5)
    emit(f"READY {producer.last_sequence_id()}")

    state = {"paused": args.paused, "stop": False, "pause_requests": 0}
    cond = threading.Condition()

    def commands() -> None:
        for line in sys.stdin:
            with cond:
                word = line.strip()
                if word == "pause":
                    state["paused"] = True
                    state["pause_requests"] += 1
                elif word == "resume":
                    state["paused"] = False
                elif word == "stop":
                    state["stop"] = True
                cond.notify_all()
        with cond:
            state["stop"] = True
            cond.notify_all()

    threading.Thread(target=commands, daemon=True).start()

    def callback(seq: int):
        def done(res: object, msg_id: object) -> None:
            if res == pulsar.Result.Ok:
                emit(f"R {seq} {msg_id.ledger_id()}:{msg_id.entry_id()}:{msg_id.batch_index()}")  # type: ignore[attr-defined]
            else:
                emit(f"F {seq} {res}")

        return done

    def flush() -> None:
        # failed sends are reported by their callbacks ("F" lines); flush raises for them too
        # (e.g. a Timeout when the producer has a send timeout)
        try:
            producer.flush()
        except pulsar.PulsarException as exc:
            emit(f"E flush {type(exc).__name__}")

    pad = bytes(random.Random(args.name).randrange(97, 123) for _ in range(max(args.size, 0)))
    seq = args.start
    group = max(args.batch, 1)
    interval = group / args.rate if args.rate > 0 else 0.0
    next_at = time.monotonic()
    while True:
        with cond:
            paused, stop, requests = state["paused"], state["stop"], state["pause_requests"]
        if stop:
            break
        if paused:
            flush()  # every group sent so far is answered
            emit(f"P {seq}")
            with cond:
                while state["paused"] and not state["stop"] and state["pause_requests"] == requests:
                    cond.wait()
            next_at = time.monotonic()
            continue
        for s in range(seq, seq + group):
            producer.send_async(f"{args.name}|{s}|".encode() + pad, callback(s), sequence_id=s)
        emit(f"S {seq} {seq + group - 1}")
        seq += group
        next_at += interval
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_at = time.monotonic()
    flush()
    client.close()
    return 0


# --- the harness side ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ProducerSpec:
    """What one producer sends: ``batch`` 1 means batching off, else groups of ``batch`` messages
    per batch; ``rate`` messages per second; ``size`` bytes of padding per payload."""

    topic: str
    name: str
    batch: int
    rate: float
    size: int

    def describe(self) -> str:
        return f"{self.name} ({f'batches of {self.batch}' if self.batch > 1 else 'unbatched'}, {self.rate:g}/s)"


class ProducerAgent:
    """Runs a `ProducerSpec` as a child process and feeds its receipts to ``on_receipt``.

    ``on_receipt(producer, seq, (ledger, entry, batch index))`` receives every receipt;
    ``on_event(kind, producer, value)`` receives ``S`` (count sent), ``F`` (failed seq) and
    ``READY`` (the broker's last sequence id) events. Thread-safe by construction: one reader
    thread per process; the handle itself is driven by one thread (the run's main thread).
    ``wrap`` prefixes the command with one that execs it (``ip netns exec NS``: a test host).
    """

    def __init__(
        self,
        spec: ProducerSpec,
        service_url: str,
        log_dir: Path,
        on_receipt: Callable[[str, int, tuple[int, int, int]], None],
        on_event: Callable[[str, str, int], None],
        wrap: tuple[str, ...] = (),
    ) -> None:
        self.spec = spec
        self.wrap = list(wrap)
        self.service_url = service_url
        self.log_dir = log_dir
        self.on_receipt = on_receipt
        self.on_event = on_event
        self.proc: subprocess.Popen[str] | None = None
        self.reader: threading.Thread | None = None
        self.receipted_top = -1  # highest receipted seq (receipts come in order)
        self.next_seq = 0  # where the next process starts
        self.paused = threading.Event()
        self._ended_by_us = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def died(self) -> str:
        """Why the process ended by itself ('' while it runs, was never started, or was killed
        by `kill`/`stop`)."""
        if self.proc is None or self.proc.poll() is None or self._ended_by_us:
            return ""
        log = self.log_dir / f"producer-{self.spec.name}.log"
        tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
        return f"producer {self.spec.name} exited with {self.proc.returncode}: {tail}"

    def resume_point(self) -> int:
        """The first sequence id of the group that holds the first id after the last receipted
        one (see the module header)."""
        group = max(self.spec.batch, 1)
        return ((self.receipted_top + 1) // group) * group

    def start(self, *, paused: bool = False) -> None:
        """Start the process at `resume_point`; returns at once."""
        assert not self.alive
        self.next_seq = self.resume_point()
        self._ended_by_us = False
        self.paused.clear()
        s = self.spec
        cmd = [
            *self.wrap,
            sys.executable,
            "-m",
            "tests.support.chaos.producer",
            "--url",
            self.service_url,
            "--topic",
            s.topic,
            "--name",
            s.name,
            "--start",
            str(self.next_seq),
            "--batch",
            str(s.batch),
            "--rate",
            str(s.rate),
            "--size",
            str(s.size),
            "--client-log",
            str(self.log_dir / f"producer-{s.name}.client.log"),
        ]
        cmd += ["--paused"] if paused else []
        repo = Path(__file__).resolve().parents[3]
        err = open(self.log_dir / f"producer-{s.name}.log", "a")  # noqa: SIM115 - closed when the process ends
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=repo,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            bufsize=1,
        )
        err.close()
        self.reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True, name=f"producer-{s.name}")
        self.reader.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        with open(self.log_dir / f"producer-{self.spec.name}.events", "a") as events:
            events.write(f"# start {time.monotonic():.3f} pid {proc.pid} at {self.next_seq}\n")
            for line in proc.stdout:
                events.write(line)
                self._parse(line)

    def _parse(self, line: str) -> None:
        parts = line.split()
        try:
            if not parts:
                return
            if parts[0] == "R" and len(parts) == 3:
                seq = int(parts[1])
                ledger, entry, index = (int(x) for x in parts[2].split(":"))
                self.receipted_top = max(self.receipted_top, seq)
                self.on_receipt(self.spec.name, seq, (ledger, entry, index))
            elif parts[0] == "S" and len(parts) == 3:
                self.on_event("S", self.spec.name, int(parts[2]) - int(parts[1]) + 1)
            elif parts[0] == "F" and len(parts) >= 3:
                self.on_event("F", self.spec.name, int(parts[1]))
            elif parts[0] == "P" and len(parts) == 2:
                self.paused.set()
            elif parts[0] == "READY" and len(parts) == 2:
                self.on_event("READY", self.spec.name, int(parts[1]))
        except ValueError:
            return  # a line cut by SIGKILL

    def _command(self, word: str) -> None:
        if self.alive:
            assert self.proc is not None and self.proc.stdin is not None
            try:
                self.proc.stdin.write(word + "\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                pass

    def request_pause(self) -> None:
        """Ask the process to stop sending; `paused` is set once everything sent is answered."""
        if self.alive:
            self.paused.clear()
            self._command("pause")

    def pause(self, timeout: float) -> bool:
        """`request_pause` and wait for it; False on time-out."""
        if not self.alive:
            return True
        self.request_pause()
        return self.paused.wait(timeout)

    def resume(self) -> None:
        self.paused.clear()
        self._command("resume")

    def kill(self) -> None:
        """SIGKILL (the application crashes with sends in flight) and read what it printed."""
        if self.proc is None:
            return
        self._ended_by_us = True
        if self.alive:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        if self.reader is not None:
            self.reader.join(10)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop cleanly (flushes what is pending), SIGKILL after ``timeout``."""
        if self.proc is None:
            return
        self._ended_by_us = True
        self._command("stop")
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        if self.reader is not None:
            self.reader.join(10)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
