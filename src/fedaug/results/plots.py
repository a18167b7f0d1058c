"""Figures from run dirs (small PNGs, PDF copies on request: :mod:`fedaug.runtime.figure_files`; matplotlib's
Agg backend); nothing here trains.

* learning curves per setting: test accuracy vs round, mean over seeds with a ± std band, one line per method;
* FLea's privacy curves: dCor between inputs and shared features (plain V-statistic and bias-corrected) and
  the feature exposure vs round;
* the Beta(a, a) density used for FLea's mix-up weights;
* accuracy vs a swept hyper-parameter (one-at-a-time sweeps: rows that differ from the method's defaults in
  one option), with the other methods' default runs as dashed lines;
* partition heat-maps (reusing :func:`fedaug.data.partition.plot_heatmap`; these read the datasets' labels);
* the fairness figure (per-client and per-class final accuracies) is in :mod:`fedaug.results.fairness_plot`.
"""

from __future__ import annotations

import logging
import math
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedaug.config.yamlio import read_yaml_file
from fedaug.engine.checkpoint import read_jsonl, summarize
from fedaug.errors import FedaugError
from fedaug.results.store import Grouping, Run, Stat, aggregate
from fedaug.results.tables import Table
from fedaug.runtime.figure_files import save_png, writes_pdf

logger = logging.getLogger(__name__)

FLEA_CURVES = (
    ("flea/dcor", "dCor (V-statistic)", 1.0),
    ("flea/dcor_u", "squared dCor (bias-corrected U-statistic)", 1.0),
    ("flea/exposure", "feature exposure (%)", 100.0),
)


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<")
"""Point markers of the settings in a figure, in order (with the colours C0-C9)."""


def setting_styles(settings: Sequence[str]) -> dict[str, tuple[str, str]]:
    """(colour, marker) of each setting in order, so that two figures of the same settings (a study's frontier
    and its attacks by round) draw each one alike: C0-C9 with :data:`MARKERS`, then the colours again with the
    markers shifted by one per round of ten, so that no two of the first hundred settings look the same."""
    return {s: (f"C{i % 10}", MARKERS[(i + i // 10) % len(MARKERS)]) for i, s in enumerate(settings)}


def new_figure(width: float, height: float) -> Any:
    """An empty matplotlib figure on the Agg canvas (a clear error without matplotlib)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise FedaugError("plotting needs matplotlib: pip install fedaug[plots]") from error
    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure: Any, stem: Path) -> list[Path]:
    """Writes ``stem.png`` (and ``stem.pdf`` inside :func:`~fedaug.runtime.figure_files.pdf_copies`); returns
    the paths written."""
    figure.tight_layout()
    return save_png(figure, stem.parent / f"{stem.name}.png")


def slug(label: str) -> str:
    """A file-name-safe label: ``uci_har Dir(0.3) K=75`` -> ``uci_har_Dir0.3_K75``."""
    return re.sub(r"[^A-Za-z0-9.-]+", "_", re.sub(r"[()=]", "", label)).strip("_")


def curve(
    runs: Sequence[Run], key: str, scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Rounds logged by every run, and the mean and std (ddof 1; 0 for one run) of ``key`` over the runs."""
    series = []
    for run in runs:
        points = {r["round"]: r[key] for r in run.metrics() if key in r}
        if points:
            series.append(points)
    if not series:
        return None
    rounds = sorted(set.intersection(*(set(s) for s in series)))
    values = np.array([[s[t] * scale for t in rounds] for s in series], dtype=float)
    std = values.std(axis=0, ddof=1) if len(series) > 1 else np.zeros(len(rounds))
    return np.array(rounds), values.mean(axis=0), std


LEGEND_OUTSIDE = 6
"""With more lines than this, a figure's legend goes to the right of the axes instead of over the curves."""


def series_style(index: int) -> dict[str, str]:
    """Colour and line style of a figure's ``index``-th line: matplotlib's ten cycle colours solid, then the
    same colours dashed, then dotted, so no two of up to 30 lines look alike (the colour cycle alone repeats
    after ten: FedData's line was FedAvg's colour in an 11-method figure)."""
    return {"color": f"C{index % 10}", "linestyle": ("-", "--", ":")[index // 10 % 3]}


def _band(axes: Any, runs: Sequence[Run], key: str, scale: float, label: str, style: dict[str, str]) -> bool:
    found = curve(runs, key, scale)
    if found is None:
        return False
    rounds, mean, std = found
    axes.plot(rounds, mean, label=f"{label} (n={len(runs)})", linewidth=1.4, **style)
    axes.fill_between(rounds, mean - std, mean + std, color=style["color"], alpha=0.2, linewidth=0)
    return True


def _legend(axes: Any, lines: int) -> None:
    if lines > LEGEND_OUTSIDE:
        axes.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    else:
        axes.legend(fontsize="small")


def plot_learning_curves(grouping: Grouping, out_dir: Path) -> list[Path]:
    """One figure per setting: test accuracy (%) vs round, mean ± std over seeds, one line per method."""
    paths = []
    for column in grouping.columns:
        many = len(grouping.rows) > LEGEND_OUTSIDE
        figure = new_figure(9.0 if many else 6.4, 4.2)
        axes = figure.add_subplot()
        seeds = [len(grouping.cells.get((row, column), [])) for row in grouping.rows]
        for index, row in enumerate(grouping.rows):
            _band(axes, grouping.cells.get((row, column), []), "test/acc", 100.0, row, series_style(index))
        what = "mean ± std over seeds" if max(seeds, default=0) > 1 else "one seed"
        axes.set(xlabel="round", ylabel="test accuracy (%)", title=textwrap.fill(f"{column}: {what}", 60))
        axes.grid(alpha=0.3)
        _legend(axes, len(grouping.rows))
        paths += save_figure(figure, out_dir / f"curves_{slug(column)}")
    return paths


def plot_job_curves(runs: Sequence[tuple[str, Path]], path: Path, title: str) -> Path | None:
    """``fedaug run``'s figure: test accuracy (%) vs round of each (label, run dir), one line each, a dot on
    its best round and a dashed line at the mean of its last 10 rounds over them (the table's "best" and
    "last-10"); None when no run has logged a round. Writes ``path`` (PNG, :func:`save_png`)."""
    figure = new_figure(6.4, 4.2)
    axes = figure.add_subplot()
    lines = 0
    for index, (label, run_dir) in enumerate(runs):
        metrics = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "test/acc" in r]
        if not metrics:
            continue
        rounds = [r["round"] for r in metrics]
        acc = [100.0 * r["test/acc"] for r in metrics]
        summary = summarize(metrics)  # the table's numbers, as summary.json has them
        best, last = 100.0 * summary["best_acc"], 100.0 * summary["last10_acc"]
        style = series_style(index)
        text = f"{label}: best {best:.2f} (round {summary['best_round']}), last-10 {last:.2f}"
        axes.plot(rounds, acc, label=text, linewidth=1.4, **style)
        axes.plot([summary["best_round"]], [best], marker="o", color=style["color"])
        span = [rounds[-min(10, len(rounds))], rounds[-1]]
        axes.plot(span, [last, last], linestyle="--", color=style["color"], linewidth=2.2)
        lines += 1
    if not lines:
        return None
    axes.set(xlabel="round", ylabel="test accuracy (%)", title=textwrap.fill(title, 60))
    axes.grid(alpha=0.3)
    _legend(axes, lines)
    figure.tight_layout()
    save_png(figure, path)
    return path


GAIN_TITLES = {"best_acc_gain": "best accuracy", "last10_acc_gain": "mean of the last 10 rounds"}
"""The gain tables drawn by :func:`plot_gains` and the title of each panel."""


def plot_gains(tables: Sequence[Table], baseline: str, out_dir: Path) -> list[Path]:
    """``gains_over_<baseline>``: each method's gain over ``baseline`` in accuracy points, paired by seed, one
    panel per statistic (best, last-10) and a group of bars per setting: the mean over seeds, its std as an
    error bar and each seed's gain as a dot. Empty without gain tables (report without ``--baseline``)."""
    gains = [t for t in tables if t.metric in GAIN_TITLES]
    if not gains:
        return []
    columns = gains[0].columns
    rows = [r for r in gains[0].rows if r != baseline and any((r, c) in gains[0].values for c in columns)]
    if not rows:
        return []
    width = 0.8 / len(rows)
    bars = len(columns) * len(rows)
    stacked = bars > 12  # many bars: the panels one above the other, each as wide as a page
    outside = stacked or len(rows) > LEGEND_OUTSIDE or max(map(len, rows)) > 24  # else over the bars
    legend = 0.055 * max(map(len, rows)) + 0.8 if outside else 0.0  # inches to the right of the panels
    if stacked:
        figure = new_figure(min(16.0, 3.0 + 0.3 * bars) + legend, 4.0 * len(gains))
    else:
        figure = new_figure(max(4.5, 1.5 + 0.45 * bars, 1.1 * len(columns)) * len(gains) + legend, 4.4)
    grid = (len(gains), 1) if stacked else (1, len(gains))
    for panel, table in enumerate(gains, start=1):
        axes = figure.add_subplot(*grid, panel)
        for index, row in enumerate(rows):
            color = series_style(index)["color"]
            label: str | None = row
            for position, column in enumerate(columns):
                by_seed = table.values.get((row, column))
                if not by_seed:
                    continue
                x = position + (index - (len(rows) - 1) / 2) * width
                stat = table.stats[(row, column)]  # mean ± std of the seeds' gains, from the gain table
                error = None if math.isnan(stat.std) else stat.std
                bar = {"yerr": error, "capsize": 3, "color": color, "alpha": 0.5, "label": label}
                axes.bar(x, stat.mean, width * 0.9, **bar)
                axes.plot([x] * len(by_seed), list(by_seed.values()), "o", color=color, markersize=3.5)
                label = None  # one legend entry per method
        axes.axhline(0.0, color="black", linewidth=0.8)
        axes.set_xticks(range(len(columns)), [textwrap.fill(c, 12) for c in columns], fontsize="small")
        axes.set(ylabel=f"gain over {baseline} (points)", title=GAIN_TITLES[table.metric])
        axes.grid(axis="y", alpha=0.3)
        if outside and panel == len(gains):
            axes.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))
        elif not outside and panel == 1:
            axes.legend(fontsize="small")
    title = f"Test accuracy minus {baseline}'s, paired by seed (bars: mean ± std over seeds; dots: seeds)"
    figure.suptitle(textwrap.fill(title, 100), fontsize="medium")
    return save_figure(figure, out_dir / f"gains_over_{slug(baseline)}")


def plot_flea_curves(grouping: Grouping, out_dir: Path) -> list[Path]:
    """Per setting with FLea runs: dCor (plain and bias-corrected) and feature exposure vs round."""
    paths = []
    for column in grouping.columns:
        rows = [r for r in grouping.rows if curve(grouping.cells.get((r, column), []), "flea/dcor")]
        if not rows:
            continue
        figure = new_figure(13.0, 3.8)
        for index, (key, label, scale) in enumerate(FLEA_CURVES, 1):
            axes = figure.add_subplot(1, len(FLEA_CURVES), index)
            for line, row in enumerate(rows):
                _band(axes, grouping.cells[(row, column)], key, scale, row, series_style(line))
            axes.set(xlabel="round", ylabel=label, title=label)
            axes.grid(alpha=0.3)
        _legend(axes, len(rows))
        figure.suptitle(textwrap.fill(f"{column}: FLea's shared features", 90))
        paths += save_figure(figure, out_dir / f"flea_privacy_{slug(column)}")
    return paths


def beta_pdf(x: np.ndarray, a: float) -> np.ndarray:
    """Density of the symmetric Beta(a, a) at ``x`` in (0, 1)."""
    log_norm = math.lgamma(2 * a) - 2 * math.lgamma(a)
    density: np.ndarray = np.exp(log_norm + (a - 1) * (np.log(x) + np.log1p(-x)))
    return density


def plot_beta_density(stem: Path, shapes: Sequence[float] = (0.5, 1.0, 2.0, 5.0)) -> list[Path]:
    """The Beta(a, a) densities of FLea's per-sample mix-up weight for a few ``a`` (paper default: 2)."""
    figure = new_figure(5.0, 3.6)
    axes = figure.add_subplot()
    x = np.linspace(0.005, 0.995, 397)
    for a in shapes:
        axes.plot(x, beta_pdf(x, a), label=f"a = {a:g}")
    axes.set(xlabel="mixing weight β", ylabel="density", title="Beta(a, a)", ylim=(0, 3.5))
    axes.grid(alpha=0.3)
    axes.legend()
    return save_figure(figure, stem)


def hparam_series(grouping: Grouping) -> dict[tuple[str, str], dict[str, list[tuple[Any, Stat]]]]:
    """(method, option) -> setting -> [(option value, best accuracy %)], from one-at-a-time sweeps.

    The rows of a method that differ from its defaults in ``option`` only, plus its default row, give the
    points; a series needs at least two values.
    """
    series: dict[tuple[str, str], dict[str, list[tuple[Any, Stat]]]] = {}
    for method in dict.fromkeys(info[0] for info in grouping.row_info.values()):
        rows = [r for r in grouping.rows if grouping.row_info[r][0] == method]
        keys = sorted({k for r in rows for k in grouping.row_info[r][1]})
        for key in keys:
            for column in grouping.columns:
                points = []
                for row in rows:
                    runs = grouping.cells.get((row, column), [])
                    if runs and set(grouping.row_info[row][1]) <= {key}:
                        value = runs[0].config.get(f"method.{key}")
                        points.append((value, aggregate([100 * r.summary["best_acc"] for r in runs])))
                if len(points) > 1:
                    series.setdefault((method, key), {})[column] = points
    return series


def _positions(values: Sequence[Any]) -> tuple[list[float], list[str] | None]:
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return [float(v) for v in values], None
    labels = sorted({"default" if v is None else str(v) for v in values})
    return [float(labels.index("default" if v is None else str(v))) for v in values], labels


def plot_hparams(grouping: Grouping, out_dir: Path) -> list[Path]:
    """Best accuracy vs each swept option (error bars: std over seeds); other methods as dashed lines."""
    paths = []
    for (method, key), by_column in hparam_series(grouping).items():
        figure = new_figure(5.6, 4.0)
        axes = figure.add_subplot()
        for column, points in by_column.items():
            color = _hparam_line(axes, sorted(points, key=_value_order), f"{method}, {column}")
            for row in grouping.rows:
                other, options = grouping.row_info[row]
                runs = grouping.cells.get((row, column), [])
                if other != method and not options and runs:
                    level = aggregate([100 * r.summary["best_acc"] for r in runs]).mean
                    axes.axhline(level, linestyle="--", linewidth=1, color=color, label=f"{row}, {column}")
        axes.set(xlabel=key, ylabel="best test accuracy (%)", title=f"{method}: accuracy vs {key}")
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
        paths += save_figure(figure, out_dir / f"hparam_{slug(method)}_{slug(key)}")
    return paths


def _value_order(point: tuple[Any, Stat]) -> tuple[bool, str, float]:
    value = point[0]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (False, "", float(value))
    return (value is not None, str(value), 0.0)


def _hparam_line(axes: Any, points: Sequence[tuple[Any, Stat]], label: str) -> Any:
    """Draws one series with std error bars; returns its colour."""
    x, labels = _positions([p[0] for p in points])
    bars = axes.errorbar(
        x,
        [p[1].mean for p in points],
        yerr=[_zero(p[1].std) for p in points],
        marker="o",
        capsize=3,
        label=label,
    )
    if labels is not None:
        axes.set_xticks(range(len(labels)), labels)
    return bars.lines[0].get_color()


def _zero(value: float) -> float:
    return 0.0 if math.isnan(value) else value


def plot_heatmaps(grouping: Grouping, out_dir: Path) -> list[Path]:
    """The partition heat-map of every setting (its first run's seed); settings without data are skipped."""
    from fedaug.config.load import config_from_dict
    from fedaug.data.partition import plot_heatmap
    from fedaug.runs.resolve import load_data_and_partition

    paths = []
    for column in grouping.columns:
        run = next(runs[0] for (_, c), runs in grouping.cells.items() if c == column and runs)
        config = config_from_dict(read_yaml_file(run.path / "config.yaml", "run config"))
        try:
            dataset, partition = load_data_and_partition(config)
        except FedaugError as error:
            logger.warning("no heat-map for %s: %s", column, error)
            continue
        stem = f"partition_{slug(column)}"
        title = f"{column} (seed {config.seed})"
        path = out_dir / f"{stem}.{'pdf' if writes_pdf() else 'png'}"
        plot_heatmap(partition.class_counts(dataset.y_train.numpy()), path, title)
        paths += sorted({out_dir / f"{stem}.png", path})
    return paths
