"""The fairness figure of ``fedaug report --plots``: who is left behind at the end of training.

Per setting whose runs logged local test accuracies (Fed-ZDA's protocol, ``partition.local_test_fraction``):

* left: the distribution over clients of the final round's local test accuracy, one box per method (all seeds'
  clients pooled), the mean as a dot; the spread of this box is what Table 1's variance summarises;
* right: the final round's global test accuracy of every class, one line per method (mean over seeds); the
  spread of each line is what Table 2's class variance summarises.

Both read the list-valued ``local/acc`` and ``test/class_acc`` of each run's final metrics record (kept by
``fedaug archive``).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedaug.results.plots import new_figure, save_figure, slug
from fedaug.results.store import Grouping, Run


def final_records(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Each run's final metrics record (runs without records are skipped), each file read once."""
    return [records[-1] for records in (run.metrics() for run in runs) if records]


def final_vector(records: Sequence[dict[str, Any]], key: str) -> list[list[float]]:
    """The list ``key`` of each final record (records without it are skipped)."""
    return [[float(v) for v in r[key]] for r in records if isinstance(r.get(key), list)]


def plot_fairness(grouping: Grouping, out_dir: Path) -> list[Path]:
    """One figure per setting with local accuracies: per-client box plot and per-class lines (in %)."""
    paths = []
    for column in grouping.columns:
        finals = {row: final_records(grouping.cells.get((row, column), [])) for row in grouping.rows}
        local = {row: final_vector(records, "local/acc") for row, records in finals.items()}
        rows = [row for row in grouping.rows if local[row]]
        if not rows:
            continue
        figure = new_figure(12.0, 4.2)
        _client_boxes(figure.add_subplot(1, 2, 1), rows, local)
        _class_lines(figure.add_subplot(1, 2, 2), rows, finals)
        figure.suptitle(textwrap.fill(f"{column}: final round", 90))
        paths += save_figure(figure, out_dir / f"fairness_{slug(column)}")
    return paths


def _client_boxes(axes: Any, rows: Sequence[str], local: dict[str, list[list[float]]]) -> None:
    pooled = [100.0 * np.concatenate([np.asarray(v) for v in local[row]]) for row in rows]
    axes.boxplot(pooled, showfliers=True, flierprops={"markersize": 3})
    axes.plot(range(1, len(rows) + 1), [p.mean() for p in pooled], "o", color="black", markersize=4)
    labels = [f"{row}\n(n={len(local[row])})" for row in rows]
    axes.set_xticks(range(1, len(rows) + 1), labels, fontsize="small", rotation=20)
    axes.set(ylabel="local test accuracy (%)", title="clients (box: quartiles; dot: mean)")
    axes.grid(alpha=0.3, axis="y")


def _class_lines(axes: Any, rows: Sequence[str], finals: dict[str, list[dict[str, Any]]]) -> None:
    for row in rows:
        per_class = final_vector(finals[row], "test/class_acc")
        if per_class:
            mean = 100.0 * np.nanmean(np.asarray(per_class, dtype=float), axis=0)
            label = f"{row} (n={len(per_class)})"
            axes.plot(range(len(mean)), mean, "o-", label=label, markersize=4, linewidth=1.2)
    axes.set(xlabel="class", ylabel="global test accuracy (%)", title="classes (mean over the n seeds)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
