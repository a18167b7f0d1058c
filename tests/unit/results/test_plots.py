"""Plots: every figure is written as a non-empty PNG and PDF; the numbers behind them are checked directly."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from fedaug.results import plots
from fedaug.results.fairness_plot import final_records, final_vector, plot_fairness
from fedaug.results.report import build_tables, write_plots
from fedaug.results.store import Grouping, group_runs, load_runs
from fedaug.runtime.figure_files import pdf_copies

pytest.importorskip("matplotlib")

FLEA_METRICS = {
    "flea/dcor": [0.99, 0.98, 0.97],
    "flea/dcor_u": [0.6, 0.5, 0.4],
    "flea/exposure": [0.0, 0.3, 0.6],
}


@pytest.fixture
def grouping(tmp_path: Path, make_run: Callable[..., Path]) -> Grouping:
    runs = tmp_path / "runs"
    for seed in (0, 1):
        make_run(runs, method="fedavg", seed=seed, accs=[0.3, 0.4 + 0.1 * seed, 0.5])
        make_run(runs, method="flea", seed=seed, accs=[0.3, 0.5, 0.6], extra_metrics=FLEA_METRICS)
        for weight in (0.0, 1.0):
            options = {"decor_weight": weight}
            make_run(runs, method="flea", seed=seed, accs=[0.3, 0.5, 0.55], options=options)
    return group_runs(load_runs(runs))


def _assert_figures(paths: list[Path]) -> None:
    assert paths
    for path in paths:
        data = path.read_bytes()
        assert len(data) > 1000, path
        assert data.startswith(b"\x89PNG" if path.suffix == ".png" else b"%PDF"), path


def test_curve_mean_and_std_over_seeds(grouping: Grouping) -> None:
    runs = grouping.cells[("fedavg", grouping.columns[0])]
    rounds, mean, std = plots.curve(runs, "test/acc", 100.0)
    assert rounds.tolist() == [1, 2, 3]
    assert mean == pytest.approx([30.0, 45.0, 50.0])
    assert std == pytest.approx([0.0, math.sqrt(50.0), 0.0])  # 40 and 50: sample std sqrt(50)


def test_beta_density_integrates_to_one() -> None:
    x = np.linspace(1e-6, 1 - 1e-6, 200001)
    for a in (1.0, 2.0, 5.0):
        assert np.trapezoid(plots.beta_pdf(x, a), x) == pytest.approx(1.0, abs=1e-3)
    assert plots.beta_pdf(np.array([0.5]), 2.0)[0] == pytest.approx(1.5)  # 6 x (1 - x) at 0.5


def test_hparam_series_uses_the_default_row(grouping: Grouping) -> None:
    series = plots.hparam_series(grouping)
    (points,) = series[("flea", "decor_weight")].values()
    values = sorted((value, stat.mean) for value, stat in points)
    assert values == [(0.0, pytest.approx(55.0)), (1.0, pytest.approx(55.0)), (3.0, pytest.approx(60.0))]


def test_every_plot_is_written(tmp_path: Path, grouping: Grouping) -> None:
    paths = write_plots(grouping, tmp_path / "plots")
    names = {p.name for p in paths}
    assert {
        "curves_uci_har_Qua2_K75.png",
        "flea_privacy_uci_har_Qua2_K75.png",
        "beta_density.png",
        "hparam_flea_decor_weight.png",
    } <= names
    assert not any(name.endswith(".pdf") for name in names)  # PNG only unless asked
    _assert_figures(paths)
    with pdf_copies():
        names = {p.name for p in write_plots(grouping, tmp_path / "with_pdf")}
    assert {"curves_uci_har_Qua2_K75.pdf", "beta_density.pdf", "hparam_flea_decor_weight.pdf"} <= names


def test_no_flea_metrics_no_privacy_plot(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    make_run(tmp_path / "runs", accs=[0.2, 0.3])
    grouping = group_runs(load_runs(tmp_path / "runs"))
    assert plots.plot_flea_curves(grouping, tmp_path / "plots") == []
    _assert_figures(plots.plot_learning_curves(grouping, tmp_path / "plots"))
    names = {path.name for path in write_plots(grouping, tmp_path / "all")}
    assert names and not any(name.startswith("beta_density") for name in names)


def test_fairness_figure_from_the_final_vectors(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    # Prepare: two methods; only the final record carries the per-client and per-class lists.
    for method, local in (("fedavg", [0.2, 0.9, 0.5]), ("fedzdac", [0.6, 0.7, 0.65])):
        run_dir = make_run(tmp_path / "runs", method=method, accs=[0.4, 0.6])
        path = run_dir / "metrics.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        rows[-1].update({"local/acc": local, "test/class_acc": [0.5, 0.7]})
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    make_run(tmp_path / "runs", method="fedprox", accs=[0.4, 0.5])  # no local accuracies: not in the figure
    grouping = group_runs(load_runs(tmp_path / "runs"))
    # Execute
    paths = plot_fairness(grouping, tmp_path / "plots")
    # Assert
    assert [p.name for p in paths] == ["fairness_uci_har_Qua2_K75.png"]
    _assert_figures(paths)
    cells = {row: grouping.cells[(row, grouping.columns[0])] for row in grouping.rows}
    assert final_vector(final_records(cells["fedavg"]), "local/acc") == [[0.2, 0.9, 0.5]]
    assert final_vector(final_records(cells["fedprox"]), "local/acc") == []


def test_no_local_accuracies_no_fairness_figure(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    make_run(tmp_path / "runs", accs=[0.2, 0.3])
    assert plot_fairness(group_runs(load_runs(tmp_path / "runs")), tmp_path / "plots") == []


def test_series_styles_stay_distinct_past_the_ten_cycle_colours() -> None:
    styles = [tuple(sorted(plots.series_style(i).items())) for i in range(30)]
    assert len(set(styles)) == 30
    assert plots.series_style(10) == {"color": "C0", "linestyle": "--"}  # FedAvg's colour, but dashed


def test_job_curves_draw_each_runs_accuracy_and_mark_its_best_round(
    tmp_path: Path, make_run: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    fedavg = make_run(tmp_path, method="fedavg", accs=[0.30, 0.55, 0.50])
    flea = make_run(tmp_path, method="flea", accs=[0.30, 0.50, 0.625], finished=False)  # a cut run counts
    empty = tmp_path / "never_ran"
    figures = []
    new_figure = plots.new_figure
    monkeypatch.setattr(plots, "new_figure", lambda *a: figures.append(new_figure(*a)) or figures[-1])
    runs = [("fedavg", fedavg), ("never", empty), ("flea", flea)]
    path = plots.plot_job_curves(runs, tmp_path / "job" / "curves.png", "a title")
    assert path == tmp_path / "job" / "curves.png" and path.read_bytes().startswith(b"\x89PNG")
    (axes,) = figures[0].axes
    curves = [(list(line.get_xdata()), list(line.get_ydata())) for line in axes.lines]
    assert np.allclose(
        [y for _, ys in curves for y in ys], [30, 55, 50, 55, 45, 45, 30, 50, 62.5, 62.5, 47.5, 47.5]
    )
    assert [x for xs, _ in curves for x in xs] == [1, 2, 3, 2, 1, 3, 1, 2, 3, 3, 1, 3]
    # per run: its curve, a dot on its best round, a dashed line at its last-10 mean (here all 3 rounds)
    labels = [text.get_text() for text in axes.get_legend().get_texts()]
    assert labels == [
        "fedavg: best 55.00 (round 2), last-10 45.00",
        "flea: best 62.50 (round 3), last-10 47.50",
    ]
    assert axes.lines[0].get_color() != axes.lines[3].get_color()
    assert plots.plot_job_curves([("never", empty)], tmp_path / "none.png", "t") is None
    assert not (tmp_path / "none.png").exists()


def test_gains_plot_draws_each_methods_paired_gain_per_seed_and_its_mean(
    tmp_path: Path, grouping: Grouping, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = []
    new_figure = plots.new_figure
    monkeypatch.setattr(plots, "new_figure", lambda *a: figures.append(new_figure(*a)) or figures[-1])
    tables = build_tables(grouping, baseline="fedavg")
    paths = plots.plot_gains(tables, "fedavg", tmp_path)
    assert [p.name for p in paths] == ["gains_over_fedavg.png"]
    _assert_figures(paths)
    best, last10 = figures[0].axes
    drawn = [r for r in grouping.rows if r != "fedavg"]
    assert [t.get_text() for t in best.get_legend().get_texts()] == drawn
    # fedavg's best is 50 in both seeds and its last-10 40 and 43.33; flea's 60 and 46.67 in both seeds
    flea = drawn.index("flea")
    assert best.patches[flea].get_height() == pytest.approx(10.0)
    assert last10.patches[flea].get_height() == pytest.approx(5.0)
    dots = [line for line in last10.lines if line.get_marker() == "o"]  # one per bar, in drawing order
    assert sorted(dots[flea].get_ydata()) == pytest.approx([10 / 3, 20 / 3])
    assert plots.plot_gains(build_tables(grouping), "fedavg", tmp_path / "none") == []  # no --baseline


def test_report_draws_the_gains_only_with_a_baseline(tmp_path: Path, grouping: Grouping) -> None:
    from fedaug.results.report import write_report

    runs_dir = grouping.cells[("fedavg", grouping.columns[0])][0].path.parents[3]
    with_baseline = write_report(runs_dir, out_dir=tmp_path / "a", plots=True, baseline="fedavg")
    assert tmp_path / "a" / "plots" / "gains_over_fedavg.png" in with_baseline.files
    without = write_report(runs_dir, out_dir=tmp_path / "b", plots=True)
    assert not any(p.name.startswith("gains_over") for p in without.files)


def test_setting_styles_first_ten_then_shifted_markers() -> None:
    names = [f"s{i}" for i in range(12)]
    styles = plots.setting_styles(names)
    assert styles["s0"] == ("C0", "o")
    assert styles["s9"] == ("C9", "<")
    # the eleventh setting reuses C0 but not C0's marker (it did once: two settings drawn alike)
    assert styles["s10"] == ("C0", "s")
    assert styles["s11"] == ("C1", "^")


def test_setting_styles_tell_a_hundred_settings_apart() -> None:
    styles = plots.setting_styles([f"s{i}" for i in range(100)])
    assert len(set(styles.values())) == 100
