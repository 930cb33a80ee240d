"""How many messages per second ``magnetar perf produce --engine native`` can offer.

A load generator is only useful while it is not the bottleneck. This runs the native engine
against a receipt-only fake broker (its own process: it answers CONNECT, PARTITIONED_METADATA,
LOOKUP and PRODUCER, and a SEND_RECEIPT for every SEND after parsing only the command, so it
costs a few microseconds per frame) and prints the rate the generator reached for each shape:

    .venv/bin/python bench/perf_generator_bench.py [--seconds 10]

The fake broker is the limit for unbatched frames (one parse per message); for batched frames it
handles ~1,000 frames/s per million msg/s with CPU to spare, so those rows measure the generator.
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import trio

from protocols.pulsar import BaseCommand, encode_command, make_command

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.ports import free_port

_TWO_U32 = struct.Struct(">II")


async def _serve_connection(stream: trio.SocketStream) -> None:
    buf = bytearray()
    async with stream:
        while True:
            try:
                data = await stream.receive_some(1 << 20)
            except trio.BrokenResourceError:
                return
            if not data:
                return
            buf += data
            out = bytearray()
            pos = 0
            while len(buf) - pos >= 8:
                total, cmd_size = _TWO_U32.unpack_from(buf, pos)
                if len(buf) - pos < total + 4:
                    break
                cmd = BaseCommand.FromString(bytes(buf[pos + 8 : pos + 8 + cmd_size]))
                pos += total + 4
                t = cmd.type
                if t == BaseCommand.SEND:
                    s = cmd.send
                    out += encode_command(
                        make_command(
                            "SEND_RECEIPT",
                            producer_id=s.producer_id,
                            sequence_id=s.sequence_id,
                            highest_sequence_id=s.highest_sequence_id,
                            message_id={"ledgerId": 1, "entryId": 1},
                        )
                    )
                elif t == BaseCommand.CONNECT:
                    out += encode_command(make_command("CONNECTED", server_version="fake", protocol_version=20))
                elif t == BaseCommand.PARTITIONED_METADATA:
                    out += encode_command(
                        make_command(
                            "PARTITIONED_METADATA_RESPONSE",
                            partitions=0,
                            response=0,
                            request_id=cmd.partitionMetadata.request_id,
                        )
                    )
                elif t == BaseCommand.LOOKUP:
                    out += encode_command(
                        make_command(
                            "LOOKUP_RESPONSE", response=1, authoritative=True, request_id=cmd.lookupTopic.request_id
                        )
                    )
                elif t == BaseCommand.PRODUCER:
                    out += encode_command(
                        make_command(
                            "PRODUCER_SUCCESS",
                            request_id=cmd.producer.request_id,
                            producer_name=f"fake-{cmd.producer.producer_id}",
                            last_sequence_id=-1,
                        )
                    )
            del buf[:pos]
            if out:
                await stream.send_all(out)


def _fake_broker(port: int) -> None:
    async def main() -> None:
        await trio.serve_tcp(_serve_connection, port, host="127.0.0.1")

    trio.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    port = free_port()
    broker = multiprocessing.get_context("spawn").Process(target=_fake_broker, args=(port,), daemon=True)
    broker.start()
    time.sleep(1.0)
    shapes = [
        ("100 B, 1000 per frame, 1 worker x 2 conns", ["-s", "100", "--workers", "1", "--connections", "2"]),
        ("100 B, 1000 per frame, 2 workers x 2 conns", ["-s", "100", "--workers", "2", "--connections", "2"]),
        (
            "1 KiB, 100 per frame, 2 workers x 2 conns",
            ["-s", "1024", "--batch-max-messages", "100", "--workers", "2", "--connections", "2"],
        ),
        (
            "100 B unbatched, 2 workers x 4 conns",
            ["-s", "100", "--no-batching", "--workers", "2", "--connections", "4", "--max-pending", "2000"],
        ),
    ]
    print(f"{'shape':<48} {'msg/s':>12} {'MB/s':>8}")
    try:
        for name, extra in shapes:
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "magnetar",
                    "perf",
                    "produce",
                    "--engine",
                    "native",
                    "-u",
                    f"pulsar://127.0.0.1:{port}",
                    "persistent://public/default/gen",
                    "-t",
                    str(args.seconds),
                    "--broker-pid",
                    str(broker.pid),
                    *extra,
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            rate = re.search(r"msg/s\s*│\s*([\d,.]+)", out)
            mbs = re.search(r"MB/s\s*│\s*([\d,.]+)", out)
            print(f"{name:<48} {rate.group(1) if rate else '?':>12} {mbs.group(1) if mbs else '?':>8}", flush=True)
    finally:
        broker.kill()


if __name__ == "__main__":
    main()
