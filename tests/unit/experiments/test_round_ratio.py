"""Round ratios to FedAvg (issue 57): recorded on the setting, else the default from the archived runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedaug.cli.main import main
from fedaug.config.identity import run_dir_for
from fedaug.config.load import load_run_config
from fedaug.engine.progress import JobEta, LaterRun, format_duration
from fedaug.sweeps.estimate import dry_run_lines, sweep_job
from fedaug.sweeps.order import SweepPoint
from fedaug.sweeps.round_ratio import (
    DEFAULT_ROUND_RATIO,
    archived_ratios,
    recorded_ratio,
    round_ratio,
    setting_ratio,
)
from tests.conftest import REPO_ROOT


def _timed(run_dir: Path, times: list[float]) -> None:
    run_dir.mkdir(parents=True)
    lines = "".join(f'{{"round": {r}, "round_time": {t}}}\n' for r, t in enumerate(times, 1))
    (run_dir / "timings.jsonl").write_text(lines)


def test_the_default_ratios_are_the_archived_runs_medians() -> None:
    # after archiving or importing new runs: python -m tools.results rewrites the table
    assert archived_ratios(REPO_ROOT / "studies") == DEFAULT_ROUND_RATIO


def test_a_ratio_recorded_on_the_setting_wins_over_the_default(tmp_path: Path) -> None:
    config = load_run_config(["default"], [f"out_dir={tmp_path}", "method=flea"])
    setting = run_dir_for(config).parents[1]  # runs/default/uci_har-quantity2-K75
    assert round_ratio(config, setting) == (DEFAULT_ROUND_RATIO["flea"], "default")
    # an earlier smoke run of the same setting timed both: FLea's rounds 1.5x FedAvg's (mean of 2 seeds)
    smoke = tmp_path / "default-smoke" / setting.name
    _timed(smoke / "fedavg" / "seed0", [2.0, 2.0])
    _timed(smoke / "fedavg" / "seed1", [4.0, 4.0])
    _timed(smoke / "flea" / "seed0", [4.5, 4.5])
    assert round_ratio(config, setting) == (1.5, "recorded")
    # the command's own setting dir comes first; rounds outside ``own`` (copied FedAvg rounds) do not count
    _timed(setting / "fedavg" / "seed0", [1.0, 1.0, 1.0])
    _timed(setting / "flea" / "seed0", [1.0, 5.0, 5.0])
    assert recorded_ratio(setting, tmp_path, "flea", range(2, 4)) == 5.0
    assert round_ratio(config, setting, range(2, 4)) == (5.0, "recorded")
    assert round_ratio(load_run_config(["default"], [f"out_dir={tmp_path}"]), setting) == (1.0, "recorded")


def test_a_method_without_a_default_or_a_recorded_ratio_has_none(tmp_path: Path) -> None:
    config = load_run_config(["default"], [f"out_dir={tmp_path}", "method=moon", "compare=[]"])
    assert "moon" not in DEFAULT_ROUND_RATIO
    assert round_ratio(config, run_dir_for(config).parents[1]) is None


def test_a_sweep_run_costs_the_runs_after_it_by_their_times_or_its_settings_ratios(tmp_path: Path) -> None:
    def point(method: str, alpha: float) -> SweepPoint:
        overrides = [f"out_dir={tmp_path}", f"method={method}", f"partition.alpha={alpha}"]
        config = load_run_config(["smoke"], overrides)
        return SweepPoint(config, run_dir_for(config), {})

    fedavg_a, flea_a, fedavg_b, flea_b = (
        point("fedavg", 0.5),
        point("flea", 0.5),
        point("fedavg", 1),
        point("flea", 1),
    )
    # setting b's FedAvg has a seed timed (2 s rounds): its runs get an estimate of their own
    _timed(fedavg_b.run_dir.parent / "seed9", [2.0, 2.0, 2.0])
    job = sweep_job(fedavg_a, [flea_a, fedavg_b, flea_b])
    flea_b_seconds = 2.0 * DEFAULT_ROUND_RATIO["flea"] * 3
    assert job == JobEta(
        (
            LaterRun("flea", 3, None, DEFAULT_ROUND_RATIO["flea"]),  # costed by this run's rounds
            LaterRun("fedavg", 3, 6.0, None),
            LaterRun("flea", 3, pytest.approx(flea_b_seconds), None),  # type: ignore[arg-type]
        ),
        ratio=1.0,
    )
    # this FedAvg run's 1 s rounds: 2 left, FLea's 3 at the default ratio's seconds, then setting b's runs
    later = 2 + 3 * DEFAULT_ROUND_RATIO["flea"] + 6 + flea_b_seconds
    assert job.text(2.0, 1.0) == f"job eta {format_duration(later)}"
    # --dry-run shows that estimate where it had '?': 2 s x the ratio x 3 rounds
    assert dry_run_lines([flea_b])[0].split()[:2] == ["new", "~15"]
    # a point of another setting that nothing has timed is left out, and said so
    assert sweep_job(fedavg_b, [point("fedavg", 2)]).text(0.0, 2.0) == "job eta >0s (fedavg not yet timed)"
    # ... unless the caller (the campaign's schedule) costs it; its 0 means it could not
    untimed = point("fedavg", 2)
    assert sweep_job(fedavg_b, [untimed], known=lambda p: 600.0).text(0.0, 2.0) == "job eta 10m00s"
    assert "not yet timed" in sweep_job(fedavg_b, [untimed], known=lambda p: 0.0).text(0.0, 2.0)


def test_a_ratio_goes_by_cpu_seconds_where_both_methods_logged_them(tmp_path: Path) -> None:
    # FedAvg's rounds were slowed by another process's load (wall 4 s, CPU 1 s), FLea's not (wall 3 s,
    # CPU 3 s): by CPU seconds FLea costs 3 FedAvg rounds, by the wall clock 0.75
    setting = tmp_path / "s"
    for method, wall, cpu in (("fedavg", 4.0, 1.0), ("flea", 3.0, 3.0)):
        run_dir = setting / method / "seed0"
        run_dir.mkdir(parents=True)
        lines = "".join(f'{{"round": {r}, "round_time": {wall}, "cpu_time": {cpu}}}\n' for r in (1, 2))
        (run_dir / "timings.jsonl").write_text(lines)
    assert setting_ratio(setting, "flea") == pytest.approx(3.0)
    # a seed without CPU seconds (an older run): the wall clock for both
    _timed(setting / "flea" / "seed1", [3.0, 3.0])
    assert setting_ratio(setting, "flea") == pytest.approx(0.75)


def test_cpu_runs_log_each_rounds_cpu_seconds(tmp_path: Path) -> None:
    assert main(["run", "smoke", "--set", f"out_dir={tmp_path}", "--set", "train.rounds=2"]) == 0
    (timings,) = tmp_path.rglob("timings.jsonl")
    rows = [json.loads(line) for line in timings.read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2]
    assert all(0 < r["cpu_time"] < 10 * r["round_time"] + 1 for r in rows)
