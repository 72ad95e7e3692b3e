"""The one place that writes ranges, durations and epoch times for people."""

from __future__ import annotations

import pytest

from statelens.readers.textfmt import format_duration_ms, format_epoch_ms, ranges


def test_ranges() -> None:
    assert ranges([1, 2, 3, 4, 7, 9, 10]) == "1-4,7,9-10"
    assert ranges([1, 2, 3, 4, 7], ", ", "–") == "1–4, 7"
    assert ranges([]) == "" and ranges([5]) == "5"


def test_epoch_ms() -> None:
    assert format_epoch_ms(1_704_067_205_000) == "2024-01-01 00:00:05.000Z"
    assert format_epoch_ms(None) == "" and format_epoch_ms(-1) == "-1 (none)" and format_epoch_ms(-5) == "-5"
    assert format_epoch_ms(10**20) == f"{10**20} ms"  # beyond the calendar: the number, not an exception


@pytest.mark.parametrize(
    ("ms", "decimal", "compact", "words"),
    [
        (850, "850 ms", "850ms", "0.8 s"),
        (12_500, "12.5 s", "12.5s", "12.5 s"),
        (85_000, "85.0 s", "1m25s", "1 min 25 s"),
        (192_000, "3.2 min", "3m12s", "3 min 12 s"),
        (3_720_000, "62.0 min", "1h02m", "1 h 2 min"),
        (187_200_000, "2.2 days", "2d04h", "2 d 4 h"),
        (-44_000, "-44.0 s", "-44.0s", "44.0 s"),
    ],
)
def test_durations_in_three_styles(ms: int, decimal: str, compact: str, words: str) -> None:
    assert format_duration_ms(ms) == decimal
    assert format_duration_ms(ms, "compact") == compact
    assert format_duration_ms(ms, "words") == words
    assert format_duration_ms(None) == ""
    with pytest.raises(ValueError, match="unknown duration style"):
        format_duration_ms(1, "fancy")
