"""The progress line's time left: recent-window estimate, duration format, and the logged line."""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fedaug.engine.progress import JobEta, LaterRun, RoundClock, format_duration
from fedaug.engine.simulation import Simulation
from fedaug.methods.fedavg import FedAvg
from tests.conftest import make_spec


def test_eta_is_the_recent_median_times_rounds_left() -> None:
    clock = RoundClock(window=3)
    assert clock.eta(10) == 0.0 and clock.typical() is None  # no round yet
    for seconds in (1.0, 2.0, 100.0, 200.0, 300.0):  # a run whose rounds became expensive
        clock.add(seconds)
    assert clock.eta(4) == 800.0  # median of the last 3 (200) x 4, not the mean of all 5 (120.6)
    assert clock.eta(0) == 0.0


def test_a_slow_first_round_stops_counting_once_three_rounds_are_in() -> None:
    clock = RoundClock()
    clock.add(50.0)  # another process held a core
    assert clock.eta(10) == 500.0  # nothing else to go on yet
    clock.add(10.0)
    clock.add(11.0)
    assert clock.eta(10) == 110.0  # the median, not the mean (23.7 s a round)


def test_job_eta_costs_later_runs_by_their_times_else_by_the_round_ratio() -> None:
    flea = LaterRun("flea", rounds=100, ratio=2.5)
    timed = LaterRun("fedprox", rounds=100, seconds=600.0, ratio=1.1)
    untimed = LaterRun("moon", rounds=100)
    # this run is FedAvg (ratio 1): its 10 s rounds cost FLea's at 25 s
    assert JobEta((flea,)).later_seconds(10.0) == (2500.0, [])
    assert JobEta((flea,)).text(60.0, 10.0) == "job eta 42m40s"
    # its own seeds' times win over the ratio
    assert JobEta((timed, flea)).later_seconds(10.0) == (3100.0, [])
    # this run is FLea (2.5): its 25 s rounds are 10 s of FedAvg's
    assert JobEta((LaterRun("fedavg", 10, ratio=1.0),), ratio=2.5).later_seconds(25.0) == (100.0, [])
    # nothing to go on: a lower bound, and which run it leaves out
    assert JobEta((flea, untimed)).text(60.0, 10.0) == "job eta >42m40s (moon not yet timed)"
    assert JobEta((flea,), ratio=None).text(60.0, 10.0) == "job eta >1m00s (flea not yet timed)"
    assert JobEta().text(0.0, None) == "job eta 0s"


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


class FakeClock:
    """A clock that moves ``step`` seconds at each read: the test sets how long each round takes."""

    def __init__(self) -> None:
        self.now, self.step = 0.0, 1.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_log_line_ends_with_the_jobs_time_left(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a FedAvg run of a command that runs FLea (4 rounds, 2.5x FedAvg's round) next
    job = JobEta((LaterRun("flea", 4, ratio=2.5),))
    spec = replace(make_spec(tmp_path, rounds=4, per_round=2), progress=True, job=job)
    sim = Simulation(spec)
    clock = FakeClock()
    monkeypatch.setattr(sim, "_now", clock)
    reads: list[float] = []
    original = sim._round

    def round_(*args: Any) -> Any:  # the first round is slow (10 s a clock read), the others fast (1 s)
        clock.step = 10.0 if args[1] == 1 else 1.0
        start = clock.now
        out = original(*args)
        reads.append(clock.now - start)
        return out

    monkeypatch.setattr(sim, "_round", round_)
    with caplog.at_level(logging.INFO, logger="fedaug.engine.simulation"):
        sim.run()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("round ")]
    times = [float(re.search(r"(\S+)s/round", line)[1]) for line in lines]  # type: ignore[index]
    slow, fast = times[0], times[1]
    assert slow > 5 * fast and times[1:] == [fast] * 3  # the fake clock's rounds
    # round 1: its own time is all there is; from round 3 the median drops the slow first round
    assert lines[0].endswith(f"job eta {format_duration(slow * 3 + slow * 2.5 * 4)}")
    assert lines[2].endswith(f"eta {format_duration(fast)}  job eta {format_duration(fast + fast * 2.5 * 4)}")
    assert lines[3].endswith(f"eta 0s  job eta {format_duration(fast * 2.5 * 4)}")


def test_the_job_eta_of_a_method_in_its_fedavg_rounds_costs_its_own_by_its_ratio(
    tmp_path: Path,
) -> None:
    sim = Simulation(make_spec(tmp_path, method=_BurnIn(), rounds=5))
    sim.spec = replace(sim.spec, job=JobEta(ratio=3.0))
    sim._time_left(1, 10.0)
    assert sim._job_left(1) == "job eta 1m40s"  # round 2 at 10 s, then its 3 own rounds at 30 s
    sim._time_left(2, 10.0)
    sim._time_left(3, 40.0)  # its first own round: the clock restarts
    assert sim._job_left(3) == "job eta 1m20s"


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
