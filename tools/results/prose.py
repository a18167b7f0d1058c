"""Generated numbers for the sentences of the study READMEs (issue #64): run times from the archived
timings. A run's time is its logged round times summed (each run's ``timings.jsonl.gz``, the reader
:func:`fedaug.engine.checkpoint.logged_round_times`), so start-up and evaluation outside the rounds are not
in it."""

from __future__ import annotations

from collections.abc import Sequence

from fedaug.engine.checkpoint import logged_round_times
from fedaug.results.store import Run
from tools.results.common import Archive, fragment, label


def run_minutes(run: Run) -> float | None:
    times = [seconds for _, seconds in logged_round_times(run.path)]
    return sum(times) / 60 if times else None


def minutes_range(runs: Sequence[Run]) -> str:
    """``lo-hi min`` over ``runs`` (rounded to whole minutes), ``lo min`` when they agree; ``-`` without
    logged times."""
    values = [m for m in (run_minutes(r) for r in runs) if m is not None]
    if not values:
        return "-"
    lo, hi = round(min(values)), round(max(values))
    return f"{lo} min" if lo == hi else f"{lo}-{hi} min"


def timed(runs: Sequence[Run]) -> str:
    """``N runs`` (``1 run``): how many of ``runs`` logged round times."""
    count = sum(run_minutes(r) is not None for r in runs)
    return f"{count} run" if count == 1 else f"{count} runs"


def fedavg_and_others(archive: Archive, study: str, others: str) -> str:
    runs = archive.study(study)
    fedavg = [r for r in runs if label(r) == "fedavg"]
    rest = [r for r in runs if label(r) != "fedavg"]
    return (
        f"FedAvg {minutes_range(fedavg)} a run ({timed(fedavg)}), {others} {minutes_range(rest)} "
        f"({timed(rest)}): the rounds' logged times summed, each run's `timings.jsonl.gz`\n"
    )


@fragment("objective-run-times")
def objective_run_times(archive: Archive) -> str:
    return fedavg_and_others(archive, "flea_objective_har/runs", "the FLea variants")


@fragment("hparams-run-times")
def hparams_run_times(archive: Archive) -> str:
    return fedavg_and_others(archive, "flea_hparams_har/runs", "the FLea runs")


@fragment("k150-run-times")
def k150_run_times(archive: Archive) -> str:
    return fedavg_and_others(archive, "flea_k150_har/runs", "the other runs (FLea, FedMix)")
