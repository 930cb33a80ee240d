"""CPU per call of the broker's per-message frame encoders: SEND_RECEIPT and MESSAGE built from
keywords (``make_command``) against the field-by-field encoders (``encode_send_receipt``,
``encode_message``) that write the same bytes. Process CPU time, so other load on the machine
moves the figures less than wall time would.

    PYTHONPATH=. .venv/bin/python bench/hot_encoders_bench.py [--calls 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from protocols.pulsar import (
    MessageMetadata,
    encode_command,
    encode_message,
    encode_metadata_and_payload,
    encode_payload_command_raw,
    encode_send_receipt,
    make_command,
)

_U64 = (1 << 64) - 1
RAW = encode_metadata_and_payload(
    MessageMetadata(producer_name="standalone-0-1", sequence_id=123456, publish_time=1), b"x" * 100
)


def receipt_by_keywords() -> bytes:
    return encode_command(
        make_command(
            "SEND_RECEIPT",
            producer_id=1,
            sequence_id=123456,
            highest_sequence_id=123456,
            message_id={"ledgerId": 17 & _U64, "entryId": 123456 & _U64},
        )
    )


def receipt_by_fields() -> bytes:
    return encode_send_receipt(1, 123456, 123456, 17, 123456)


def message_by_keywords() -> bytes:
    return encode_payload_command_raw(
        make_command("MESSAGE", consumer_id=1, message_id={"ledgerId": 17 & _U64, "entryId": 123456 & _U64}), RAW
    )


def message_by_fields() -> bytes:
    return encode_message(1, 17, 123456, RAW)


def cpu_us(fn: Callable[[], bytes], calls: int) -> float:
    """Process CPU microseconds per call of ``fn`` over ``calls`` calls."""
    t0 = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - t0) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    assert receipt_by_keywords() == receipt_by_fields() and message_by_keywords() == message_by_fields()
    for fn in (receipt_by_keywords, receipt_by_fields, message_by_keywords, message_by_fields):
        rounds = [cpu_us(fn, args.calls) for _ in range(args.rounds)]
        print(
            f"{fn.__name__:22} "
            + ", ".join(f"{r:.2f}" for r in rounds)
            + f" us (median {sorted(rounds)[len(rounds) // 2]:.2f})"
        )


if __name__ == "__main__":
    main()
