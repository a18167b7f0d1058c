"""The progress line's time left: recent-window estimate, duration format, and the logged line."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from fedaug.engine.progress import RoundClock, format_duration
from fedaug.engine.simulation import Simulation
from fedaug.methods.fedavg import FedAvg
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


def test_log_line_says_what_follows_the_run(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # a run of a command that runs flea next (fedaug run with compare: [fedavg, flea])
    spec = replace(make_spec(tmp_path, rounds=2, per_round=2), progress=True, after="then flea (100 rounds)")
    with caplog.at_level(logging.INFO, logger="fedaug.engine.simulation"):
        Simulation(spec).run()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("round ")]
    assert lines[1].endswith("eta 0s, then flea (100 rounds)")


class _BurnIn(FedAvg):
    """FedAvg that declares its first two rounds FedAvg's (as Fed-ZDA's burn-in does)."""

    name = "burnin"

    def fedavg_rounds(self, num_rounds: int) -> int:
        del num_rounds
        return 2


def test_eta_stops_at_the_burn_in_and_restarts_the_clock_after_it(tmp_path: Path) -> None:
    sim = Simulation(make_spec(tmp_path, method=_BurnIn(), rounds=5))
    assert sim._time_left(1, 10.0) == "10s to round 2, then 3 burnin rounds not yet timed"
    assert sim._time_left(2, 10.0) == "3 burnin rounds not yet timed"
    # Round 3 is the first of its own: 100 s x 2 rounds left, not the mean with FedAvg's 10 s rounds (80 s).
    assert sim._time_left(3, 100.0) == "3m20s"
    assert sim._time_left(4, 50.0) == "1m15s"
    assert sim._time_left(5, 50.0) == "0s"


def test_eta_of_a_method_without_burn_in_counts_every_round(tmp_path: Path) -> None:
    sim = Simulation(make_spec(tmp_path, rounds=3))
    assert sim._time_left(1, 10.0) == "20s"
    assert sim._time_left(2, 30.0) == "20s"
