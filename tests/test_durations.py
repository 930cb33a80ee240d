"""`magnetar.common.durations`: one grammar for every duration a command takes, accepting what
Pulsar's RelativeTimeUtil accepts with the same meaning, and what Magnetar's commands took before."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from magnetar.cli import main
from magnetar.cli._admin_api import retention_mb, retention_minutes, seconds
from magnetar.cli._perf import parse_duration as perf_duration
from magnetar.common.durations import parse_duration

PULSAR_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(sorted(PULSAR_UNITS)), st.booleans())
def test_every_pulsar_spelling_means_what_it_means_to_pulsar(n: int, unit: str, upper: bool) -> None:
    text = f"{n}{unit.upper() if upper else unit}"
    assert parse_duration(text) == n * PULSAR_UNITS[unit]
    assert parse_duration(str(n)) == n  # no unit: seconds, as Pulsar


@pytest.mark.parametrize(
    ("text", "bare_unit", "expected"),
    [
        ("1.5h", "s", 5400.0),
        (".5m", "s", 30.0),
        ("500ms", "s", 0.5),
        ("  10 m ", "s", 600.0),
        ("-1", "m", -60.0),
        ("+2d", "s", 172800.0),
        ("30", "m", 1800.0),
        ("90s", "m", 90.0),
    ],
)
def test_fractions_milliseconds_signs_and_the_bare_unit(text: str, bare_unit: str, expected: float) -> None:
    assert parse_duration(text, bare_unit=bare_unit) == expected


@pytest.mark.parametrize("text", ["", "m", "10x", "1mo", "1e3", "10 s s", "ten", "1_000", "nan", "inf", "1..5s"])
def test_anything_else_is_refused_naming_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("-1", -1), ("0", 0), ("120", 2), ("30", 0), ("2h", 120), ("90s", 1), ("30m", 30), ("1.5h", 90), ("7d", 10080)],
)
def test_retention_times_are_seconds_sent_as_whole_minutes_as_pulsar_admin(text: str, expected: int) -> None:
    assert retention_minutes(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"), [("-1", -1), ("0", 0), ("1048576", 1), ("1000", 0), ("100M", 100), ("2G", 2048), ("512k", 0)]
)
def test_retention_sizes_are_bytes_sent_as_whole_mb_as_pulsar_admin(text: str, expected: int) -> None:
    assert retention_mb(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"), [("600", 600), ("10m", 600), ("1w", 604800), ("0", 0), ("0.2s", 1), ("1y", 365 * 86400)]
)
def test_inactive_durations_are_seconds(text: str, expected: int) -> None:
    assert seconds(text) == expected


def test_perf_refuses_a_negative_run_length() -> None:
    import click

    assert perf_duration("250ms") == 0.25
    with pytest.raises(click.BadParameter, match="must be >= 0"):
        perf_duration("-5s")


def test_token_expiry_takes_the_same_grammar(tmp_path) -> None:
    key = tmp_path / "secret.key"
    runner = CliRunner()
    assert runner.invoke(main, ["tokens", "create-secret-key", "--output", str(key)]).exit_code == 0
    ok = runner.invoke(
        main, ["tokens", "create", "--secret-key", f"file://{key}", "--subject", "alice", "--expiry-time", "1.5h"]
    )
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(
        main,
        ["tokens", "create", "--secret-key", f"file://{key}", "--subject", "alice", "--expiry-time", "1 fortnight"],
    )
    assert bad.exit_code == 2 and "not a duration" in bad.output
