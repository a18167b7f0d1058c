"""The seed-0 search of issue #65 (c) (:mod:`tools.results.studies_tuning`): which runs stand for a value,
when a value is chosen, and what the table says."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tools.results.common import Archive
from tools.results.studies_tuning import Search, chosen, chosen_text, har_tuning, searches

MakeRun = Callable[..., Path]
CAMPAIGN = """
grids:
  - name: flea_har_tuning
    preset: flea_table1_har
    study: flea_har_tuning
    grid:
      seed: [0]
      method:
        - {name: fedprox, proximal_mu: 0.1}
        - {name: fedprox, proximal_mu: 0.001}
"""


def _studies(tmp_path: Path, make_run: MakeRun, best: dict[float, float]) -> Archive:
    """FedAvg and FedProx's default (mu 0.01) archived as the table studies hold them, the searched values
    as this study's; ``best``: each mu's best accuracy (a value missing: not run)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "campaign.yaml").write_text(CAMPAIGN)
    make_run(tmp_path / "baselines_har" / "runs", method="fedavg", accs=[0.30, 0.60, 0.50])
    for mu, acc in best.items():
        where = "baselines_har" if mu == 0.01 else "flea_har_tuning"
        options = None if mu == 0.01 else {"proximal_mu": mu}
        make_run(tmp_path / where / "runs", method="fedprox", options=options, accs=[0.20, acc, 0.40])
    return Archive(tmp_path)


def test_a_value_is_chosen_by_seed_0s_best_once_every_value_has_run(
    tmp_path: Path, make_run: MakeRun
) -> None:
    # Prepare: the default and mu 0.1 run, mu 0.001 not yet; and seed 1 of mu 0.001, which must not count
    archive = _studies(tmp_path, make_run, {0.01: 0.55, 0.1: 0.70})
    make_run(tmp_path / "flea_har_tuning" / "runs", method="fedprox", seed=1, options={"proximal_mu": 0.001})
    (search,) = searches([{"name": "fedprox", "proximal_mu": 0.1}, {"name": "fedprox", "proximal_mu": 0.001}])
    assert search == Search("fedprox", "proximal_mu", (0.01, 0.1, 0.001), 0.01)
    # Act / Assert: pending, then chosen by the best (mu 0.1), then a tie going to the default
    assert chosen(archive, search) is None
    assert json.loads(chosen_text(archive)) == {"method": []}  # the seeds 1-2 grid has no points yet
    assert "| fedprox | proximal_mu=0.01 (default) | 55.00 / 38.33 | pending: 1 of 3 values to run |" in (
        har_tuning(archive)
    )
    done = _studies(tmp_path / "b", make_run, {0.01: 0.55, 0.1: 0.70, 0.001: 0.65})
    assert chosen(done, search) == 0.1
    assert json.loads(chosen_text(done)) == {"method": [{"name": "fedprox", "proximal_mu": 0.1}]}
    table = har_tuning(done).splitlines()
    assert table[2] == "| FedAvg | - | 60.00 / 46.67 | (reference) |"
    assert table[4] == "| fedprox | proximal_mu=0.1 | 70.00 / 43.33 | **chosen** |"
    assert sum("**chosen**" in line for line in table) == 1
    tie = _studies(tmp_path / "c", make_run, {0.01: 0.70, 0.1: 0.70, 0.001: 0.65})
    assert chosen(tie, search) == 0.01


def test_a_run_that_changed_another_option_stands_for_no_value(tmp_path: Path, make_run: MakeRun) -> None:
    archive = _studies(tmp_path, make_run, {0.01: 0.55, 0.1: 0.70})
    where = tmp_path / "flea_har_tuning" / "runs"
    make_run(where, method="fedprox", options={"proximal_mu": 0.001, "local_ce_weight": 1.0})
    (search,) = searches([{"name": "fedprox", "proximal_mu": 0.001}])
    assert chosen(archive, search) is None


@pytest.mark.parametrize(
    "entries",
    [
        [{"name": "fedprox"}],
        [{"name": "fedprox", "proximal_mu": 0.1, "local_epochs": 2}],
        [{"name": "fedlc", "calibration_tau": 0.1}, {"name": "fedlc", "other": 1}],
        ["fedprox"],
    ],
)
def test_a_grid_entry_must_search_one_option_per_method(entries: list[object]) -> None:
    with pytest.raises(ValueError, match="flea_har_tuning"):
        searches(entries)


def test_the_tuned_row_pairs_the_chosen_value_with_fedavg_over_its_seeds(
    tmp_path: Path, make_run: MakeRun
) -> None:
    from tools.results.studies_tuning import har_tuned_gains

    archive = _studies(tmp_path, make_run, {0.01: 0.55, 0.1: 0.70, 0.001: 0.65})
    assert har_tuned_gains(archive).startswith("| method at the value seed 0 chose |")
    # seeds 1-2 of the chosen value and of FedAvg: best 0.70 / 0.72 against FedAvg's 0.60 / 0.61
    for seed, (ours, base) in {1: (0.70, 0.60), 2: (0.72, 0.61)}.items():
        make_run(tmp_path / "flea_har_tuning" / "runs", method="fedprox", seed=seed,
                 options={"proximal_mu": 0.1}, accs=[0.20, ours, 0.40])  # fmt: skip
        make_run(tmp_path / "baselines_har" / "runs", method="fedavg", seed=seed, accs=[0.30, base, 0.50])
    row = har_tuned_gains(Archive(tmp_path)).splitlines()[2]
    # best gains +10, +10, +11 (seeds 0-2); the default's seed 0: 55 - 60
    assert row.startswith("| `fedprox` proximal_mu=0.1 | Qua(2) | seeds 0-2 | +10.33 ± 0.58, 3 of 3 seeds |")
    assert "| -5.00 |" in row
    # a split the chosen value has no runs on yet has no row; once it has, it gets one
    assert len(har_tuned_gains(Archive(tmp_path)).splitlines()) == 3
    make_run(tmp_path / "flea_har_tuning" / "runs", method="fedprox", partition="dir0.3",
             options={"proximal_mu": 0.1}, accs=[0.20, 0.70, 0.40])  # fmt: skip
    make_run(tmp_path / "baselines_har" / "runs", method="fedavg", partition="dir0.3", accs=[0.30, 0.65, 0.5])
    rows = har_tuned_gains(Archive(tmp_path)).splitlines()
    assert len(rows) == 4 and rows[3].startswith("| `fedprox` proximal_mu=0.1 | Dir(0.3) | seed 0 |")
