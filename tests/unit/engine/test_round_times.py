"""The one reader of a run's measured round times, ``timings.jsonl`` or its archived ``.gz``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from fedaug.engine.checkpoint import logged_round_times


def _lines(records: list[dict[str, float]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def test_round_and_time_of_each_timed_line_in_file_order(tmp_path: Path) -> None:
    records = [
        {"round": 1, "round_time": 2.5, "train": 2.0},
        {"round": 2, "train": 1.0},
        {"round": 3, "round_time": 4.0},
    ]
    (tmp_path / "timings.jsonl").write_text(_lines(records) + '{"round": 4, "round_ti')  # cut by a kill
    assert logged_round_times(tmp_path) == [(1, 2.5), (3, 4.0)]


def test_an_archived_run_is_read_from_its_gzip_and_an_untimed_one_is_empty(tmp_path: Path) -> None:
    (tmp_path / "timings.jsonl.gz").write_bytes(
        gzip.compress(_lines([{"round": 7, "round_time": 1.25}]).encode())
    )
    assert logged_round_times(tmp_path) == [(7, 1.25)]
    assert logged_round_times(tmp_path / "nothing") == []
