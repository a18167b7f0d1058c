"""The progress line's time left: recent-window estimate, duration format, and the logged line."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from fedaug.engine.progress import RoundClock, format_duration
from fedaug.engine.simulation import Simulation
from tests.conftest import make_spec


def test_eta_is_the_recent_mean_times_rounds_left() -> None:
    clock = RoundClock(window=3)
    assert clock.eta(10) == 0.0  # no round yet
    for seconds in (1.0, 2.0, 100.0, 200.0, 300.0):  # a run whose rounds became expensive
        clock.add(seconds)
    assert clock.eta(4) == 800.0  # mean of the last 3 (200) x 4, not of all 5 (120.6)
    assert clock.eta(0) == 0.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.4, "0s"),
        (42.9, "42s"),
        (60, "1m00s"),
        (365, "6m05s"),
        (3599, "59m59s"),
        (3720, "1h02m"),
        (-3, "0s"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_log_line_ends_with_time_left(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    spec = replace(make_spec(tmp_path, rounds=2, per_round=2), progress=True)
    with caplog.at_level(logging.INFO, logger="fedaug.engine.simulation"):
        Simulation(spec).run()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("round ")]
    assert len(lines) == 2
    assert lines[0].startswith("round 1/2 ") and " eta " in lines[0]
    assert lines[1].endswith("eta 0s")  # nothing left after the last round
