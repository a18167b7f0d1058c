"""Reading fabricated run dirs and aggregating seeds: exact means and standard deviations."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from fedaug.errors import FedaugError
from fedaug.methods.flea.method import FLeaEq6Config
from fedaug.results.store import aggregate, group_runs, load_runs, setting_label


def test_aggregate_is_mean_and_sample_std() -> None:
    stat = aggregate([70.0, 72.0, 74.0])
    assert stat.mean == pytest.approx(72.0)
    assert stat.std == pytest.approx(2.0)  # sqrt(((-2)^2 + 0 + 2^2) / (3 - 1))
    assert stat.n == 3
    single = aggregate([61.5])
    assert single.mean == 61.5 and math.isnan(single.std) and single.n == 1


def test_seeds_of_a_cell_are_grouped(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    # Prepare: three seeds of fedavg with best accuracies 0.70, 0.72, 0.74 and last-10 means 0.6, 0.62, 0.64
    for seed, best in enumerate([0.70, 0.72, 0.74]):
        make_run(tmp_path, seed=seed, accs=[best - 0.2, best])
    # Execute
    grouping = group_runs(load_runs(tmp_path))
    # Assert
    assert grouping.rows == ["fedavg"]
    assert grouping.columns == ["uci_har Qua(2) K=75"]
    runs = grouping.cells[("fedavg", "uci_har Qua(2) K=75")]
    assert sorted(r.seed for r in runs) == [0, 1, 2]
    best = aggregate([100 * r.summary["best_acc"] for r in runs])
    last10 = aggregate([100 * r.summary["last10_acc"] for r in runs])
    assert (best.mean, best.std) == (pytest.approx(72.0), pytest.approx(2.0))
    assert (last10.mean, last10.std) == (pytest.approx(62.0), pytest.approx(2.0))


def test_rows_columns_and_their_order(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    for partition in ("dir0.1", "qua2", "dir0.3"):
        for clients in (150, 75):
            for method in ("flea", "fedprox", "fedavg"):
                make_run(tmp_path, method=method, partition=partition, num_clients=clients)
    grouping = group_runs(load_runs(tmp_path))
    assert grouping.rows == ["fedavg", "fedprox", "flea"]
    assert grouping.columns == [
        "uci_har Qua(2) K=75",
        "uci_har Dir(0.3) K=75",
        "uci_har Dir(0.1) K=75",
        "uci_har Qua(2) K=150",
        "uci_har Dir(0.3) K=150",
        "uci_har Dir(0.1) K=150",
    ]


def test_non_default_method_options_make_their_own_row(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    make_run(tmp_path, method="flea", options={"decor_weight": 3.0})  # the default: plain "flea"
    make_run(tmp_path, method="flea", options={"decor_weight": 0.0}, seed=1)
    grouping = group_runs(load_runs(tmp_path))
    assert grouping.rows == ["flea", "flea (decor_weight=0.0)"]
    assert grouping.row_info["flea (decor_weight=0.0)"] == ("flea", {"decor_weight": 0.0})
    (plain,) = grouping.cells[("flea", grouping.columns[0])]
    assert plain.config["method.mix_beta"] == 2.0  # defaults filled in for comparison and plots


def test_other_differing_keys_split_the_settings(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    make_run(tmp_path, train={"local_epochs": 1})
    make_run(tmp_path, train={"local_epochs": 5}, seed=1)
    grouping = group_runs(load_runs(tmp_path))
    assert grouping.columns == ["uci_har Qua(2) K=75, local_epochs=1", "uci_har Qua(2) K=75, local_epochs=5"]


def test_engine_settings_share_a_column_but_precision_splits_it(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    # Prepare: seeds run with different thread counts and a data dir (same results), one bf16 run
    make_run(tmp_path, seed=0, engine={"num_threads": 1})
    make_run(tmp_path, seed=1, engine={"num_threads": 2, "progress": False})
    make_run(tmp_path, seed=2, engine={"precision": "bf16"})
    # Execute
    grouping = group_runs(load_runs(tmp_path))
    # Assert
    bf16, float32 = "uci_har Qua(2) K=75, precision=bf16", "uci_har Qua(2) K=75, precision=float32"
    assert grouping.columns == [bf16, float32]
    assert [r.seed for r in grouping.cells[("fedavg", grouping.columns[1])]] == [0, 1]


def test_keys_differing_only_between_methods_label_rows(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    # Prepare: fedavg and flea as usual, flea_official with its preset's training settings (one column)
    make_run(tmp_path, method="fedavg")
    make_run(tmp_path, method="flea")
    official = {"lr_schedule": "official_flea", "reset_optimizer_every_step": True}
    make_run(tmp_path, method="flea_official", train=official)
    make_run(tmp_path, method="flea_official", train=official, partition="dir0.1")
    make_run(tmp_path, method="fedavg", partition="dir0.1", train={"lr_schedule": "exponential"})
    # Execute
    grouping = group_runs(load_runs(tmp_path))
    # Assert
    label = "flea_official (lr_schedule=official_flea, reset_optimizer_every_step=True)"
    assert grouping.columns == ["uci_har Qua(2) K=75", "uci_har Dir(0.1) K=75"]
    assert grouping.rows == ["fedavg", "flea", label]
    assert grouping.row_info[label] == ("flea_official", {})
    assert len(grouping.cells[(label, "uci_har Dir(0.1) K=75")]) == 1


def test_unfinished_runs_are_skipped_unless_included(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    make_run(tmp_path, seed=0, accs=[0.5, 0.7])
    make_run(tmp_path, seed=1, accs=[0.4, 0.6], finished=False)
    assert [r.seed for r in load_runs(tmp_path)] == [0]
    runs = load_runs(tmp_path, include_unfinished=True)
    unfinished = next(r for r in runs if r.seed == 1)
    assert not unfinished.finished
    assert unfinished.summary["best_acc"] == 0.6 and unfinished.summary["last10_acc"] == pytest.approx(0.5)


def test_a_repeated_seed_is_counted_once(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    make_run(tmp_path / "a", seed=0, accs=[0.5])
    make_run(tmp_path / "b", seed=0, accs=[0.9])
    grouping = group_runs(load_runs(tmp_path))
    (runs,) = grouping.cells.values()
    assert len(runs) == 1 and runs[0].summary["best_acc"] == 0.5  # the first in path order


def test_missing_runs_dir(tmp_path: Path) -> None:
    with pytest.raises(FedaugError, match="does not exist"):
        load_runs(tmp_path / "nope")


def test_setting_label_for_mean_local_size() -> None:
    config = {
        "data.name": "cifar10",
        "partition.name": "iid",
        "partition.num_clients": None,
        "partition.mean_local_size": 500.0,
    }
    assert setting_label(config) == "cifar10 IID n=500"


def test_rows_use_the_options_a_run_recorded_not_todays_defaults(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    # Prepare: a run made when flea's defaults were Eq. 6's: config.yaml names no option, env.json records
    # every option it used (as the runner writes it)
    run_dir = make_run(tmp_path, method="flea")
    used = dataclasses.asdict(FLeaEq6Config())
    (run_dir / "env.json").write_text(json.dumps({"method_config": used}))
    make_run(tmp_path, method="flea", seed=1)  # today's default, without an env.json
    # Execute
    grouping = group_runs(load_runs(tmp_path))
    # Assert: the old run is labelled with what differs from today's flea, and its config holds what it used
    label = "flea (decor_form=dcor_squared, decor_schedule=constant, local_ce_weight=0.0)"
    assert grouping.rows == ["flea", label]
    assert grouping.row_info[label] == (
        "flea",
        {"decor_form": "dcor_squared", "decor_schedule": "constant", "local_ce_weight": 0.0},
    )
    (old,) = grouping.cells[(label, grouping.columns[0])]
    assert old.config["method.decor_form"] == "dcor_squared" and old.config["method.mix_beta"] == 2.0
