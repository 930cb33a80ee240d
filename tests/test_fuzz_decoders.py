"""Every decoder of outside bytes survives a fixed-seed slice of bench/fuzz_decoders.py.

The full run (>= 1 M inputs per decoder, see bench/RESULTS.md) is too long for CI. This runs the
same targets, mutations and checks in-process on 1,500 inputs each (a few seconds in all), so a
change that lets a decoder raise an undocumented error, depend on how bytes were split, or break
a round trip fails here. A failure names the input: reproduce it with
``.venv/bin/python bench/fuzz_decoders.py --seed 20261124 --replay <target>:<index>``.
"""

from __future__ import annotations

import pytest

from tests.support.fuzz import all_targets, fuzz_inline

SEED = 20261124
INPUTS = 1_500


@pytest.mark.parametrize("name", list(all_targets()))
def test_decoder_survives_mutated_inputs(name: str) -> None:
    # A generous hang threshold: CI machines are shared; the full run uses 1 s.
    stats = fuzz_inline(name, INPUTS, seed=SEED, hang_s=5.0)
    assert stats.inputs == INPUTS
    problems = [f"input {index}: {sig}\n{detail}" for sig, index, _, detail in stats.crashes + stats.hangs]
    assert not problems, f"{len(problems)} failures, the first:\n{problems[0]}"
    assert len(stats.outcomes) > 1  # the inputs reached more than one outcome
