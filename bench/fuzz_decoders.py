"""Decoder fuzzing: every decoder of bytes that come from outside the process, fed >= 1 M inputs.

    .venv/bin/python bench/fuzz_decoders.py [--inputs 1000000] [--jobs 2] [--seed 1]
        [--only pulsar_frames,cookie] [--crash-dir /tmp/magnetar-fuzz-crashes] [--hang-seconds 1.0]
    .venv/bin/python bench/fuzz_decoders.py --list
    .venv/bin/python bench/fuzz_decoders.py --replay cookie:12345 [--seed 1]   # one input, traceback shown
    .venv/bin/python bench/fuzz_decoders.py --replay-file cookie /tmp/magnetar-fuzz-crashes/cookie/x.bin

What is fed. Each target (``--list``) owns a few valid encodings made with the project's own
encoders, and every input is one of:

* purely random bytes (8 %) or a valid encoding as is (4 %);
* a valid encoding (for streaming decoders: several concatenated) under 1-8 stacked mutations:
  bit flips, interesting bytes, a length field overwritten with an interesting or off-by-a-few
  value at a frame boundary, truncation, deletion, insertion, duplication, splicing with another
  encoding, overlong varints, zeroed ranges, dictionary tokens (non-ASCII digits, surrogates and
  other invalid UTF-8, separators); for checksummed formats half of these then get their
  checksums recomputed, so that the mutation reaches the parser behind the checksum;
* a structure-aware build: the inner layer (a BaseCommand, a MessageMetadata, a batch, a
  protobuf body) is mutated and then wrapped in a correct outer layer (sizes, magic, CRC).

Streaming decoders (both frame decoders, journal replay, entry-log scans) are fed in random chunk
sizes (1 byte, a few bytes, up to the whole input) and checked against a one-shot feed: the
frames and errors must be identical however the bytes were split. Successful decodes are
re-encoded where an encoder exists and must decode to the same value. The UTF-8 check every
protobuf decoder relies on (``protocols/_utf8.py``) is checked against two plain walks.

Verdicts. An exception other than the target's documented error types is a crash; so is a
broken property (chunking-dependent output, failed round trip). An input that takes more than
``--hang-seconds`` (re-timed three times, the minimum counts) is a hang; a worker whose input
counter does not move for ``--watchdog-seconds`` is killed, its input saved as a hang, and it is
restarted after that input. Inputs are generated from ``(seed, target, index)`` only, so
``--replay target:index`` reproduces any input exactly. Crashing inputs are written to
``--crash-dir/<target>/`` (three per distinct signature) with a ``.txt`` holding the traceback.
Exit status 1 on any crash or hang.

One process per target, ``--jobs`` at a time (each under an address-space limit, so a memory
bomb is a crash, not an OOM kill). Pure mutation rather than coverage guidance (atheris): the
decoders' Python branches are shallow, and the protobuf parsing underneath is upb's C code,
which atheris does not instrument unless protobuf is rebuilt for it. The structure-aware
builders reach the Python branches directly. Only the standard library and the project's own
dependencies are used; nothing to install.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.fuzz import _MAX_OUTCOMES, Runner, Stats, Target, all_targets

# ---------------------------------------------------------------------------- worker processes


def _worker(name: str, start: int, stop: int, opts: dict, conn: Any, progress: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    if opts["memory_mb"]:
        import resource

        limit = opts["memory_mb"] * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    runner = Runner(
        all_targets()[name], opts["seed"], opts["hang_s"], Path(opts["crash_dir"]) if opts["crash_dir"] else None
    )
    sent = [0, 0]

    def report(stats: Stats) -> None:
        new_c, new_h = stats.crashes[sent[0] :], stats.hangs[sent[1] :]
        sent[0], sent[1] = len(stats.crashes), len(stats.hangs)
        conn.send(("progress", stats.inputs, stats.slowest, stats.slowest_index, stats.elapsed, new_c, new_h))

    stats = runner.run(start, stop, Stats(name), progress, report)
    stats.crashes, stats.hangs = stats.crashes[sent[0] :], stats.hangs[sent[1] :]
    conn.send(("done", stats))
    conn.close()


@dataclass
class _Job:
    name: str
    stop: int
    total: Stats
    start: int = 0
    proc: Any = None
    conn: Any = None
    progress: Any = None
    seg: Stats | None = None  # the running segment, as last reported
    last_index: int = -1
    last_move: float = 0.0
    launched: float = 0.0


def fuzz_all(names: list[str], inputs: int, opts: dict) -> dict[str, Stats]:
    """Fuzz ``names`` with ``inputs`` each, ``opts["jobs"]`` worker processes at a time."""
    import multiprocessing as mp
    from multiprocessing.connection import wait

    ctx = mp.get_context("fork")
    pending = [_Job(n, inputs, Stats(n)) for n in names]
    running: list[_Job] = []
    done: dict[str, Stats] = {}
    targets = all_targets()
    t_print = time.monotonic()

    announced: set[tuple[str, str]] = set()

    def announce(job: _Job, found: list) -> None:
        for sig, index, path, _ in found:  # once per signature: a bug can fail thousands of inputs
            if (job.name, sig) not in announced:
                announced.add((job.name, sig))
                print(f"  !! {job.name} input {index}: {sig} -> {path or '(not saved)'}", flush=True)

    def launch(job: _Job) -> None:
        parent, child = ctx.Pipe(duplex=False)
        job.progress = ctx.Value("q", job.start, lock=False)
        job.proc = ctx.Process(
            target=_worker, daemon=True, args=(job.name, job.start, job.stop, opts, child, job.progress)
        )
        job.proc.start()
        child.close()
        job.conn, job.seg = parent, Stats(job.name)
        job.last_index, job.last_move = job.start, time.monotonic()
        job.launched = job.last_move
        running.append(job)

    def lost(job: _Job, kind: str, detail: str) -> None:
        """The worker is gone (killed by the watchdog, or died): save its input, go on after it."""
        index = job.progress.value
        seg = job.seg
        seg.inputs = index - job.start + 1
        seg.elapsed = time.monotonic() - job.launched
        runner = Runner(
            targets[job.name], opts["seed"], opts["hang_s"], Path(opts["crash_dir"]) if opts["crash_dir"] else None
        )
        data, _ = runner.input(index)
        sig = f"{kind}: {detail}"
        path = runner.save(kind, sig, index, data, detail)
        (seg.hangs if kind == "hang" else seg.crashes).append((sig, index, path, detail))
        announce(job, [(sig, index, path, detail)])
        job.total.merge(seg)
        running.remove(job)
        job.start = index + 1
        if job.start < job.stop:
            pending.insert(0, job)
        else:
            done[job.name] = job.total

    while pending or running:
        while pending and len(running) < opts["jobs"]:
            launch(pending.pop(0))
        ready = wait([j.conn for j in running], timeout=0.5)
        now = time.monotonic()
        for job in list(running):
            if job.conn in ready:
                try:
                    msg = job.conn.recv()
                except EOFError:
                    job.proc.join(5)
                    lost(job, "died", f"worker exited with status {job.proc.exitcode}")
                    continue
                if msg[0] == "progress":
                    _, n, slowest, slow_i, elapsed, new_c, new_h = msg
                    job.seg.inputs, job.seg.elapsed = n, elapsed
                    if slowest > job.seg.slowest:
                        job.seg.slowest, job.seg.slowest_index = slowest, slow_i
                    job.seg.crashes += new_c
                    job.seg.hangs += new_h
                    announce(job, new_c + new_h)
                else:
                    final = msg[1]
                    final.crashes = job.seg.crashes + final.crashes
                    final.hangs = job.seg.hangs + final.hangs
                    announce(job, final.crashes[len(job.seg.crashes) :] + final.hangs[len(job.seg.hangs) :])
                    job.total.merge(final)
                    job.proc.join()
                    running.remove(job)
                    done[job.name] = job.total
                    t = job.total
                    print(
                        f"done {job.name}: {t.inputs:,} inputs, {len(t.outcomes):,} outcomes, "
                        f"{len(t.crashes)} crashes, {len(t.hangs)} hangs, {t.elapsed:.0f} s, "
                        f"slowest input {t.slowest_index} ({t.slowest * 1000:.1f} ms)",
                        flush=True,
                    )
                continue
            index = job.progress.value
            if index != job.last_index:
                job.last_index, job.last_move = index, now
            elif now - job.last_move > opts["watchdog_s"]:
                job.proc.kill()
                job.proc.join()
                lost(job, "hang", f"no progress for {opts['watchdog_s']:.0f} s")
        if now - t_print >= 15:
            t_print = now
            for job in running:
                n = job.total.inputs + job.seg.inputs
                rate = job.seg.inputs / job.seg.elapsed if job.seg.elapsed else 0
                crashes = len(job.total.crashes) + len(job.seg.crashes)
                hangs = len(job.total.hangs) + len(job.seg.hangs)
                print(f"  {job.name}: {n:,}/{inputs:,} ({rate:,.0f}/s) crashes={crashes} hangs={hangs}", flush=True)
    return done


# ---------------------------------------------------------------------------- report and CLI


def table(results: dict[str, Stats], names: list[str]) -> str:
    """The per-target figures as a Markdown table."""
    lines = [
        "| decoder | inputs | distinct outcomes | crashes | hangs | slowest input | total time |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n in names:
        s = results[n]
        distinct = f"{len(s.outcomes):,}" + ("+" if len(s.outcomes) >= _MAX_OUTCOMES else "")
        lines.append(
            f"| `{n}` | {s.inputs:,} | {distinct} | {len(s.crashes)} | {len(s.hangs)} | "
            f"{s.slowest * 1000:.1f} ms | {s.elapsed:.0f} s |"
        )
    return "\n".join(lines)


def _replay(name: str, data: bytes, rng: random.Random, target: Target, seed: int) -> int:
    runner = Runner(target, seed, 1.0, None)
    t0 = time.perf_counter()
    key, crash = runner.one(data, rng)
    dt = time.perf_counter() - t0
    print(f"{name}: {len(data)} bytes -> {key} in {dt * 1000:.2f} ms")
    print(data[:256].hex())
    if crash is not None:
        traceback.print_exception(crash)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inputs", type=int, default=1_000_000, help="inputs per decoder (default 1,000,000)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes at a time (default 2)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--only", default="", help="comma-separated target names")
    p.add_argument("--crash-dir", default="/tmp/magnetar-fuzz-crashes", help="where crashing inputs go")
    p.add_argument("--hang-seconds", type=float, default=1.0, help="an input slower than this is a hang")
    p.add_argument(
        "--watchdog-seconds",
        type=float,
        default=0.0,
        help="kill a worker whose input counter has not moved for this long "
        "(default: 10 s, at least 4 x --hang-seconds: a slow input is timed 3 times)",
    )
    p.add_argument("--memory-mb", type=int, default=2048, help="address-space limit per worker (0: none)")
    p.add_argument("--list", action="store_true", help="list the targets and exit")
    p.add_argument("--replay", metavar="TARGET:INDEX", help="run one generated input, show its outcome")
    p.add_argument("--replay-file", nargs=2, metavar=("TARGET", "FILE"), help="run one saved input")
    args = p.parse_args(argv)
    targets = all_targets()
    if args.list:
        for t in targets.values():
            print(
                f"{t.name:18} {t.decoders}\n{'':18} documented errors: "
                f"{', '.join(e.__name__ for e in t.expected) or '(none: never raises)'}"
            )
        return 0
    if args.replay:
        name, _, index = args.replay.partition(":")
        runner = Runner(targets[name], args.seed, args.hang_seconds, None)
        data, rng = runner.input(int(index))
        return _replay(name, data, rng, targets[name], args.seed)
    if args.replay_file:
        name, path = args.replay_file
        return _replay(name, Path(path).read_bytes(), random.Random(0), targets[name], args.seed)
    names = [n for n in args.only.split(",") if n] or list(targets)
    unknown = [n for n in names if n not in targets]
    if unknown:
        p.error(f"unknown targets {unknown}; --list shows them")
    watchdog = args.watchdog_seconds or max(10.0, 4 * args.hang_seconds)
    opts = {
        "seed": args.seed,
        "hang_s": args.hang_seconds,
        "watchdog_s": watchdog,
        "crash_dir": args.crash_dir,
        "jobs": max(1, args.jobs),
        "memory_mb": args.memory_mb,
    }
    print(
        f"fuzzing {len(names)} decoders x {args.inputs:,} inputs, seed {args.seed}, "
        f"{opts['jobs']} processes, crashes to {args.crash_dir}",
        flush=True,
    )
    t0 = time.monotonic()
    results = fuzz_all(names, args.inputs, opts)
    wall = time.monotonic() - t0
    print()
    print(table(results, names))
    crashes = sum(len(results[n].crashes) for n in names)
    hangs = sum(len(results[n].hangs) for n in names)
    for n in names:
        found = Counter(sig for sig, *_ in results[n].crashes + results[n].hangs)
        for sig, count in sorted(found.items()):
            print(f"  {n}: {count:,} x {sig}")
    print(f"\n{sum(results[n].inputs for n in names):,} inputs in {wall:.0f} s wall: {crashes} crashes, {hangs} hangs")
    return 1 if crashes or hangs else 0


if __name__ == "__main__":
    sys.exit(main())
