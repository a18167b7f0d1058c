"""Fed-ZDA fairness tables in `fedaug report`: only with local tests, variances in %^2, lowest is best."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from fedaug.engine.fairness import FAIRNESS_KEYS, fairness_summary
from fedaug.results.reference import load_reference
from fedaug.results.report import build_tables
from fedaug.results.store import group_runs, load_runs
from fedaug.sweeps.sweep import expand_sweep
from tests.conftest import REPO_ROOT


def _with_fairness(
    run_dir: Path,
    local_mean: float,
    local_var: float,
    class_var: float,
    earlier: tuple[float, float, float] | None = None,
) -> None:
    """Gives the run's rounds local tests (the last round ``local_mean``, ``local_var``, ``class_var``; the
    earlier ones ``earlier``, default the same) and its summary the fairness numbers they give, as a run
    with local tests writes them (a summary its metrics do not give is refused as damaged)."""
    metrics = run_dir / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    last = (local_mean, local_var, class_var)
    for i, record in enumerate(records):
        values = last if i == len(records) - 1 or earlier is None else earlier
        keys = (FAIRNESS_KEYS[k] for k in ("local_acc_mean", "local_acc_var", "class_acc_var"))
        record.update(zip(keys, values, strict=True))
    metrics.write_text("".join(json.dumps(record) + "\n" for record in records))
    path = run_dir / "summary.json"
    summary = json.loads(path.read_text())
    summary.update(fairness_summary(records))
    path.write_text(json.dumps(summary))


def test_fairness_tables_scale_and_pick_the_lowest_variance(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    # Prepare: FedAvg (local variance 0.0368 = 368 %^2) and Fed-ZDAS (0.0188 = 188 %^2).
    _with_fairness(make_run(tmp_path, method="fedavg", accs=[0.5, 0.8]), 0.853, 0.0368, 0.0435)
    _with_fairness(make_run(tmp_path, method="fedzdas", accs=[0.5, 0.7]), 0.8623, 0.0188, 0.0260)
    reference = tmp_path / "ref.yaml"
    reference.write_text(
        "tables:\n  - id: zda\n    metric: local_acc_var\n    settings: {s: {data.name: uci_har}}\n"
        "    results: {fedavg: {s: 368 ± 222}}\n"
    )
    # Execute
    tables = build_tables(group_runs(load_runs(tmp_path)), reference=load_reference(reference))
    by_metric = {t.metric: t for t in tables}
    # Assert
    assert list(by_metric)[2:6] == [
        "local_acc_mean_final",
        "local_acc_var_final",
        "global_acc_final",
        "class_acc_var_final",
    ]
    var = by_metric["local_acc_var_final"]
    column = var.columns[0]
    assert var.stats[("fedavg", column)].mean == pytest.approx(368.0)
    assert var.best[column] == {"fedzdas"}  # lower variance is fairer
    assert by_metric["local_acc_mean_final"].stats[("fedzdas", column)].mean == pytest.approx(86.23)
    assert by_metric["local_acc_mean_final"].best[column] == {"fedzdas"}
    assert var.reference[("fedavg", column)][0].mean == 368.0


def test_fairness_gains_over_a_baseline_pick_the_lowest_variance(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    _with_fairness(make_run(tmp_path, method="fedavg", accs=[0.5, 0.8]), 0.853, 0.0368, 0.0435)
    _with_fairness(make_run(tmp_path, method="fedzdas", accs=[0.5, 0.7]), 0.8623, 0.0188, 0.0260)
    by_metric = {t.metric: t for t in build_tables(group_runs(load_runs(tmp_path)), baseline="fedavg")}
    assert list(by_metric)[4:8] == [
        "local_acc_mean_final",
        "local_acc_mean_final_gain",
        "local_acc_var_final",
        "local_acc_var_final_gain",
    ]
    gain = by_metric["local_acc_var_final_gain"]
    column = gain.columns[0]
    assert gain.stats[("fedzdas", column)].mean == pytest.approx(-180.0)  # 188 - 368 %^2
    assert gain.best[column] == {"fedzdas"}  # the larger drop in variance
    assert gain.title == (
        "Variance of local test accuracy over clients (%^2; lower is fairer), final round, minus fedavg's, "
        "paired by seed"
    )
    assert by_metric["global_acc_final_gain"].best[column] == {"fedavg"}  # 80 vs 70: higher is better


def test_last10_fairness_tables_when_runs_have_them(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    run_dir = make_run(tmp_path, method="fedavg", accs=[0.5, 0.8])
    # round 1 such that the two rounds' means are 0.84, 0.02 and 0.03
    _with_fairness(run_dir, 0.853, 0.0368, 0.0435, earlier=(0.827, 0.0032, 0.0165))
    tables = {t.metric: t for t in build_tables(group_runs(load_runs(tmp_path)))}
    assert list(tables)[6:] == [
        "local_acc_mean_last10",
        "local_acc_var_last10",
        "global_acc_last10",
        "class_acc_var_last10",
    ]
    column = tables["local_acc_var_last10"].columns[0]
    assert tables["local_acc_var_last10"].stats[("fedavg", column)].mean == pytest.approx(200.0)  # %^2
    assert tables["local_acc_mean_last10"].stats[("fedavg", column)].mean == pytest.approx(84.0)


def test_no_fairness_tables_without_local_tests(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    make_run(tmp_path, method="fedavg")
    assert [t.metric for t in build_tables(group_runs(load_runs(tmp_path)))] == ["best_acc", "last10_acc"]


def test_fedzda_preset_expands_to_the_papers_grid() -> None:
    points = expand_sweep(REPO_ROOT / "configs" / "experiments" / "fedzda_tables.yaml")
    assert len(points) == 60
    configs = [p.config for p in points]
    assert {c.method.name for c in configs} == {"fedavg", "fedprox", "qffl", "fedzdac", "fedzdas"}
    assert {c.data.name for c in configs} == {"mnist", "fashion_mnist"}
    assert {c.partition.name for c in configs} == {"shards", "multimodal"}
    multimodal = {c.partition.options.get("balance") for c in configs if c.partition.name == "multimodal"}
    assert multimodal == {"clients"}  # the paper's class-imbalanced aggregate
    assert {c.method.options.get("q") for c in configs if c.method.name == "qffl"} == {0.01}
    zdas = {c.method.options.get("server_batch_size") for c in configs if c.method.name == "fedzdas"}
    assert zdas == {100}  # 10 server steps a round (README: "Fed-ZDAS's server step")
    first = configs[0]
    assert (first.partition.num_clients, first.partition.local_test_fraction) == (100, 0.25)
    assert (first.train.rounds, first.train.local_epochs, first.train.batch_size) == (100, 5, 10)
    assert (first.train.optimizer, first.train.lr, first.train.lr_decay) == ("sgd", 0.02, 1.0)
    assert first.model.name == "bn_cnn_mnist"
