"""Archived JSON lines kept to fewer significant digits: rounded floats, everything else as it was."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fedaug.results.archive import write_gzipped
from fedaug.results.compact import METRIC_DIGITS, compact_lines, compact_run, rounded


def test_rounded_keeps_significant_digits_in_nested_values() -> None:
    record = {"round": 3, "test/acc": 0.166610111978283, "local/acc": [0.123456789, 1], "x": {"y": 1e-05 / 3}}
    assert rounded(record, 8) == {
        "round": 3,
        "test/acc": 0.16661011,
        "local/acc": [0.12345679, 1],
        "x": {"y": 3.3333333e-06},
    }
    assert rounded(14.21572292700148, 4) == 14.22 and rounded("a", 4) == "a" and rounded(True, 4) is True
    assert math.isnan(rounded(math.nan, 4)) and rounded(math.inf, 4) == math.inf


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_rounding_moves_a_value_by_less_than_its_last_kept_digit_and_is_idempotent(value: float) -> None:
    once = rounded(value, METRIC_DIGITS)
    assert abs(once - value) <= 5e-8 * abs(value) + 1e-300 and rounded(once, METRIC_DIGITS) == once


def test_compact_run_rewrites_metrics_and_timings_in_place(tmp_path: Path) -> None:
    rows = [{"round": r, "test/acc": r / 2947, "train/loss": 1 / (r + 7)} for r in range(1, 101)]
    write_gzipped(tmp_path / "metrics.jsonl.gz", "".join(json.dumps(r) + "\n" for r in rows))
    write_gzipped(
        tmp_path / "timings.jsonl.gz", json.dumps({"round": 1, "round_time": 14.21572292700148}) + "\n"
    )
    before = (tmp_path / "metrics.jsonl.gz").stat().st_size
    compact_run(tmp_path)
    metrics = [
        json.loads(line)
        for line in gzip.decompress((tmp_path / "metrics.jsonl.gz").read_bytes()).splitlines()
    ]
    assert metrics[0] == {"round": 1, "test/acc": 0.00033932813, "train/loss": 0.125}
    assert (tmp_path / "metrics.jsonl.gz").stat().st_size < before
    timings = json.loads(gzip.decompress((tmp_path / "timings.jsonl.gz").read_bytes()))
    assert timings == {"round": 1, "round_time": 14.22}
    size = (tmp_path / "metrics.jsonl.gz").stat().st_size
    assert compact_lines(tmp_path / "metrics.jsonl.gz", METRIC_DIGITS) == size  # twice: the same bytes
