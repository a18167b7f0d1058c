"""Result tables like the papers' Table 1: methods as rows, settings as columns, mean ± std over seeds.

One :class:`Table` per metric (``best_acc``: best test accuracy over rounds, the papers' number;
``last10_acc``: mean of the last 10 rounds, steadier). The best mean of each column is bold; with a
highlighted method, its relative improvement over the best *other* method (``exclude`` left out: by default
the bounds, :data:`NOT_COMPARED`) is shown with the papers' arrows: ↑ above 5 %, ↑↑ above 10 %. Published
numbers (:mod:`fedaug.results.reference`) go in a column beside each setting they match.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from fedaug.results.reference import ReferenceTable, lookup
from fedaug.results.stand_ins import labels_stand_in
from fedaug.results.store import Grouping, Run, Stat, aggregate

NOT_COMPARED = ("feddata", "local", "centralized")
"""Never the "best other" method by default: the bounds beside the federated methods. FedData gives up privacy
(the papers leave it out); ``local`` (every client alone, the floor) and ``centralized`` (the pooled data, the
ceiling) are reference runs."""

_ACCURACY = ("best_acc", "last10_acc")
METRICS = {
    "best_acc": "Best test accuracy (%)",
    "last10_acc": "Mean test accuracy of the last 10 rounds (%)",
    # Fed-ZDA's fairness tables (engine/fairness.py), values of the final round
    "local_acc_mean_final": "Local test accuracy, mean over clients (%), final round",
    "local_acc_var_final": "Variance of local test accuracy over clients (%^2; lower is fairer), final round",
    "global_acc_final": "Global test accuracy (%), final round",
    "class_acc_var_final": "Variance of accuracy across classes (%^2; lower is fairer), final round",
    # the same over the last 10 rounds (the final round is one noisy draw); the paper column: its final round
    "local_acc_mean_last10": "Local test accuracy, mean over clients (%), mean of the last 10 rounds",
    "local_acc_var_last10": "Variance of local test accuracy over clients (%^2), mean of the last 10 rounds",
    "global_acc_last10": "Global test accuracy (%), mean of the last 10 rounds",
    "class_acc_var_last10": "Variance of accuracy across classes (%^2), mean of the last 10 rounds",
}
# gain_table: a method's number minus the baseline row's, in the same setting and seed (ours), and the paper's
METRICS |= {
    "best_acc_gain": "Best test accuracy minus the baseline's (points)",
    "last10_acc_gain": "Last-10 mean test accuracy minus the baseline's (points)",
    **{f"{m}_gain": f"{text}, minus the baseline's" for m, text in METRICS.items() if m not in _ACCURACY},
}
_FAIRNESS = ("local_acc_mean", "local_acc_var", "global_acc", "class_acc_var")
FAIRNESS_METRICS = tuple(f"{m}_{when}" for when in ("final", "last10") for m in _FAIRNESS)
LOWER_IS_BETTER = {m for m in FAIRNESS_METRICS if "_var_" in m}
SCALE = dict.fromkeys(LOWER_IS_BETTER, 1e4)  # fraction^2 -> %^2; the rest: x100
REFERENCE_METRIC = {m: m.rsplit("_", 1)[0] for m in FAIRNESS_METRICS}  # published tables' metric names


@dataclass(frozen=True)
class Improvement:
    """Relative improvement (%) of the highlighted method's mean over the best other row of a column."""

    percent: float
    other: str

    @property
    def arrows(self) -> str:
        """``↑↑`` above 10 %, ``↑`` above 5 %, else ''."""
        return "↑↑" if self.percent > 10 else "↑" if self.percent > 5 else ""


@dataclass
class Table:
    """The numbers of one table; rendering is left to :func:`to_markdown`, :func:`to_latex`, :func:`to_csv`.

    Attributes:
        metric: the summary key (``best_acc`` or ``last10_acc``).
        rows: row labels (methods); columns: column labels (settings).
        stats: mean ± std (%) over seeds per (row, column) that has runs.
        values: per (row, column), the value (%) of each seed (gain tables: the per-seed differences).
        best: per column, the rows with the highest mean.
        highlight: the highlighted row (None: no comparison).
        improvements: per column, the highlighted row's improvement over the best other row.
        reference: per (row, column), the published number and the table it comes from.
        unfinished: cells that include unfinished runs (marked ``†``).
        cpus: per (row, column), the CPU model each seed's run ran on (None: not recorded).
        cross_cpu: gain cells with a seed whose two runs ran on different recorded CPUs (marked ``‡``).
        caption: a title replacing the metric's (gain tables name their baseline).
    """

    metric: str
    rows: list[str]
    columns: list[str]
    stats: dict[tuple[str, str], Stat]
    values: dict[tuple[str, str], dict[int, float]] = field(default_factory=dict)
    best: dict[str, set[str]] = field(default_factory=dict)
    highlight: str | None = None
    improvements: dict[str, Improvement] = field(default_factory=dict)
    reference: dict[tuple[str, str], tuple[Stat, ReferenceTable]] = field(default_factory=dict)
    unfinished: set[tuple[str, str]] = field(default_factory=set)
    cpus: dict[tuple[str, str], dict[int, str | None]] = field(default_factory=dict)
    cross_cpu: set[tuple[str, str]] = field(default_factory=set)
    caption: str | None = None

    @property
    def title(self) -> str:
        """A human title of the metric (``caption`` when set)."""
        return self.caption or METRICS.get(self.metric, self.metric)

    def reference_columns(self) -> list[str]:
        """Columns that have at least one published number."""
        return [c for c in self.columns if any((r, c) in self.reference for r in self.rows)]


def build_table(
    grouping: Grouping,
    metric: str,
    *,
    highlight: str | None = None,
    exclude: Sequence[str] = NOT_COMPARED,
    reference: Sequence[ReferenceTable] = (),
) -> Table:
    """Aggregates ``metric`` (a fraction in summary.json) over the seeds of every cell, in percent.

    Variances (``*_var_*``) are shown in %^2 and their best is the lowest; cells whose runs lack the metric
    are left empty.
    """
    scale = SCALE.get(metric, 100.0)
    values = {
        key: {run.seed: scale * run.summary[metric] for run in runs}
        for key, runs in grouping.cells.items()
        if runs and all(metric in run.summary for run in runs)
    }
    stats = {key: aggregate(list(by_seed.values())) for key, by_seed in values.items()}
    table = Table(metric, list(grouping.rows), list(grouping.columns), stats, values)
    table.unfinished = {key for key, runs in grouping.cells.items() if any(not r.finished for r in runs)}
    table.cpus = {key: {run.seed: run.cpu for run in grouping.cells[key]} for key in values}
    table.best = _best_rows(table, lowest=metric in LOWER_IS_BETTER)
    table.caption = _last_rounds_caption(metric, [r for key in values for r in grouping.cells[key]])
    if highlight is not None and metric not in LOWER_IS_BETTER:  # improvements assume higher is better
        table.highlight = resolve_row(grouping, highlight)
        table.improvements = _improvements(table, grouping, exclude)
    for row, column in stats:
        method, options = grouping.row_info[row]
        config = grouping.column_config[column]
        # a published row is keyed by the row label ("ccvr (variant=shared_features)"), or by the method
        # name for its default settings
        ref_metric = REFERENCE_METRIC.get(metric, metric)
        found = lookup(reference, ref_metric, row, config)
        if found is None and not options:
            found = lookup(reference, ref_metric, method, config)
        if found is not None:
            table.reference[(row, column)] = found
    return table


def _last_rounds_caption(metric: str, runs: Sequence[Run]) -> str | None:
    """A ``*last10*`` metric's title with the rounds its runs of fewer than 10 rounds average (``the last 3
    rounds``; None: every run has 10 or more, the title stands)."""
    counts = {min(10, int(run.summary.get("rounds", 10))) for run in runs}
    if "last10" not in metric or not counts or counts == {10}:
        return None
    last = f"last {min(counts)}-10" if len(counts) > 1 else f"last {counts.pop()}"
    return METRICS.get(metric, metric).replace("last 10", last)


def gain_table(table: Table, baseline: str) -> Table:
    """``table`` as differences to the ``baseline`` row in each column, paired by seed; the paper's too.

    Ours: the mean ± std over the seeds both rows have of (row's value - baseline's value) with the same seed,
    so the spread is that of the effect, not of the seeds (runs of one seed share the partition, the client
    sampling and, for branched runs, the burn-in); a cell without a seed in common with the baseline is left
    empty. The paper's: difference of the published means (no std). Where our baseline sits far from the
    paper's (a different FedAvg), the gains still compare the methods' effects. The baseline's row is all
    zeros. Metric ``<metric>_gain``; for variances the best gain is the lowest.

    A cell with a seed whose run and baseline run ran on different CPU models (both recorded) is marked
    ``‡``: float rounding differs between CPUs (:mod:`fedaug.runtime.machine`), so the rounds the pair should
    share
    (a branched run's burn-in) drift apart and the difference holds that drift too.
    """
    gains: dict[tuple[str, str], Stat] = {}
    values: dict[tuple[str, str], dict[int, float]] = {}
    reference: dict[tuple[str, str], tuple[Stat, ReferenceTable]] = {}
    cross_cpu: set[tuple[str, str]] = set()
    for (row, column), by_seed in table.values.items():
        base = table.values.get((baseline, column), {})
        diffs = {seed: value - base[seed] for seed, value in by_seed.items() if seed in base}
        if diffs:
            values[(row, column)] = diffs
            gains[(row, column)] = aggregate([diffs[seed] for seed in sorted(diffs)])
            if any(_other_cpu(table, (row, column), (baseline, column), seed) for seed in diffs):
                cross_cpu.add((row, column))
        ref, ref_base = table.reference.get((row, column)), table.reference.get((baseline, column))
        if ref is not None and ref_base is not None:
            reference[(row, column)] = (Stat(ref[0].mean - ref_base[0].mean, math.nan, 0), ref[1])
    metric = f"{table.metric}_gain"
    gain = Table(metric, list(table.rows), list(table.columns), gains, values, reference=reference)
    gain.unfinished = table.unfinished & set(gains)
    gain.cross_cpu = cross_cpu
    gain.caption = METRICS[metric].replace("the baseline's", f"{baseline}'s") + ", paired by seed"
    gain.best = _best_rows(gain, lowest=table.metric in LOWER_IS_BETTER)
    return gain


def _other_cpu(table: Table, cell: tuple[str, str], base: tuple[str, str], seed: int) -> bool:
    """Whether ``seed``'s runs of ``cell`` and ``base`` ran on different CPU models, both recorded."""
    cpu, base_cpu = table.cpus.get(cell, {}).get(seed), table.cpus.get(base, {}).get(seed)
    return cpu is not None and base_cpu is not None and cpu != base_cpu


def _best_rows(table: Table, *, lowest: bool) -> dict[str, set[str]]:
    """Per column, the rows with the highest (``lowest``: the lowest) mean."""
    best = {}
    for column in table.columns:
        means = {r: table.stats[(r, column)].mean for r in table.rows if (r, column) in table.stats}
        top = (min if lowest else max)(means.values(), default=math.nan)
        best[column] = {r for r, m in means.items() if m == top}
    return best


def resolve_row(grouping: Grouping, highlight: str) -> str | None:
    """The row ``highlight`` names: a row label, or the first row of that method name (None if none)."""
    if highlight in grouping.rows:
        return highlight
    return next((r for r in grouping.rows if grouping.row_info[r][0] == highlight), None)


def _improvements(table: Table, grouping: Grouping, exclude: Sequence[str]) -> dict[str, Improvement]:
    found: dict[str, Improvement] = {}
    target = table.highlight
    if target is None:
        return found
    skip = {*exclude, grouping.row_info[target][0]}  # variants of the highlighted method are not "others"
    for column in table.columns:
        if (target, column) not in table.stats:
            continue
        others = [r for r in table.rows if (r, column) in table.stats and grouping.row_info[r][0] not in skip]
        if not others:
            continue
        best_other = max(others, key=lambda r: table.stats[(r, column)].mean)
        base = table.stats[(best_other, column)].mean
        if base > 0:
            percent = 100 * (table.stats[(target, column)].mean - base) / base
            found[column] = Improvement(percent, best_other)
    return found


def format_stat(stat: Stat, *, pm: str = "±", seeds: bool = True) -> str:
    """``75.17 ± 0.42 (n=5)``; one seed has no std: ``75.17 (n=1)``."""
    text = f"{stat.mean:.2f}" if math.isnan(stat.std) else f"{stat.mean:.2f} {pm} {stat.std:.2f}"
    return f"{text} (n={stat.n})" if seeds and stat.n else text


def _cells(table: Table, row: str, *, bold: str, pm: str, arrow: dict[str, str]) -> list[str]:
    cells = []
    ref_columns = set(table.reference_columns())
    for column in table.columns:
        stat = table.stats.get((row, column))
        text = "–" if stat is None else format_stat(stat, pm=pm)
        if stat is not None and row in table.best.get(column, set()):
            text = bold.format(text)
        if (row, column) in table.unfinished:
            text += arrow["†"]
        if (row, column) in table.cross_cpu:
            text += arrow["‡"]
        improvement = table.improvements.get(column)
        if row == table.highlight and improvement is not None and improvement.arrows:
            text += " " + arrow[improvement.arrows]
        cells.append(text)
        if column in ref_columns:
            ref = table.reference.get((row, column))
            cells.append("–" if ref is None else format_stat(ref[0], pm=pm, seeds=False))
    return cells


def _header(table: Table) -> list[str]:
    ref_columns = set(table.reference_columns())
    header = ["method"]
    for column in table.columns:
        header.append(column)
        if column in ref_columns:
            ids = sorted({t.id for (_, c), (_, t) in table.reference.items() if c == column})
            data = "; the paper's data, not this copy" if labels_stand_in(column) else ""
            header.append(f"paper ({', '.join(ids)}{data})")
    return header


def _improvement_row(table: Table) -> list[str] | None:
    if table.highlight is None or not table.improvements:
        return None
    ref_columns = set(table.reference_columns())
    cells = [f"{table.highlight} vs best other"]
    for column in table.columns:
        found = table.improvements.get(column)
        cells.append(
            "–" if found is None else f"{found.percent:+.1f}% vs {found.other}{_unpaired_mark(table, column)}"
        )
        if column in ref_columns:
            cells.append("")
    return cells


UNPAIRED_NOTE = "§ the two means are over different seeds (n: highlighted vs other), so they are not paired."


def _unpaired_mark(table: Table, column: str) -> str:
    """`` § (n 3 vs 1)`` when the highlighted row's seeds in ``column`` differ from its best other row's."""
    found = table.improvements.get(column)
    if found is None or table.highlight is None:
        return ""
    mine = set(table.values.get((table.highlight, column), {}))
    other = set(table.values.get((found.other, column), {}))
    return "" if mine == other else f" § (n {len(mine)} vs {len(other)})"


def seeds_note(table: Table) -> str:
    """What a cell holds: ``mean ± std over seeds (n = seeds)``, or ``one seed (n = 1)`` when no cell has more
    (no std to show)."""
    if table.stats and all(stat.n == 1 for stat in table.stats.values()):
        return "one seed (n = 1)"
    return "mean ± std over seeds (n = seeds)"


def to_markdown(table: Table) -> str:
    """A GitHub Markdown table (best per column in bold, arrows on the highlighted row)."""
    header = _header(table)
    lines = [f"**{table.title}**, {seeds_note(table)}", ""]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    arrows = {"↑": "↑", "↑↑": "↑↑", "†": "†", "‡": "‡"}
    for row in table.rows:
        lines.append(
            "| " + " | ".join([row, *_cells(table, row, bold="**{}**", pm="±", arrow=arrows)]) + " |"
        )
    extra = _improvement_row(table)
    if extra is not None:
        lines.append("| " + " | ".join(extra) + " |")
        lines += ["", "↑: relative improvement over the best other method > 5 %; ↑↑: > 10 %."]
        if any(_unpaired_mark(table, column) for column in table.columns):
            lines += ["", UNPAIRED_NOTE]
    if table.unfinished:
        lines += ["", "† includes unfinished runs (their numbers so far)."]
    if table.cross_cpu:
        lines += [
            "",
            "‡ a seed's run and its baseline run ran on different CPU models (env.json), so they do not "
            "share float rounding: rounds that should match (a branched run's burn-in) drift apart, and the "
            "difference holds that drift too.",
        ]
    return "\n".join(lines) + "\n"


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$"}
_LATEX_SPECIAL |= {"{": r"\{", "}": r"\}", "§": r"\S{}"}


def _latex_escape(text: str) -> str:
    escaped = "".join(_LATEX_SPECIAL.get(char, char) for char in text)
    return escaped.replace("–", "--").replace("±", r"$\pm$")


def to_latex(table: Table) -> str:
    """A ``tabular`` (booktabs) with ``\\textbf`` for the best per column and ``$\\uparrow$`` arrows."""
    header = [_latex_escape(h) for h in _header(table)]
    arrows = {"↑": r"$\uparrow$", "↑↑": r"$\uparrow\uparrow$", "†": r"$^\dagger$", "‡": r"$^\ddagger$"}
    lines = [
        f"% {table.title}, mean $\\pm$ std over seeds (n = seeds)",
        r"\begin{tabular}{l" + "r" * (len(header) - 1) + "}",
        r"\toprule",
        " & ".join(header) + r" \\",
        r"\midrule",
    ]
    for row in table.rows:
        cells = _cells(table, row, bold="\\textbf{{{}}}", pm="$\\pm$", arrow=arrows)
        escaped = [c.replace("–", "--").replace("(n=", "($n$=") for c in cells]
        lines.append(" & ".join([_latex_escape(row), *escaped]) + r" \\")
    extra = _improvement_row(table)
    if extra is not None:
        lines.append(r"\midrule")
        lines.append(" & ".join(_latex_escape(c) for c in extra) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


CSV_FIELDS = (
    *("metric", "method", "setting", "mean", "std", "n", "is_best", "rel_improvement_pct", "vs"),
    *("paper_mean", "paper_std", "paper_source"),
)


def to_csv(tables: Sequence[Table]) -> str:
    """One line per (metric, method, setting) with raw numbers (long format, easy to load in pandas)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for table in tables:
        for row in table.rows:
            for column in table.columns:
                stat = table.stats.get((row, column))
                if stat is None:
                    continue
                found = table.improvements.get(column) if row == table.highlight else None
                ref = table.reference.get((row, column))
                writer.writerow(
                    [
                        table.metric,
                        row,
                        column,
                        f"{stat.mean:.4f}",
                        "" if math.isnan(stat.std) else f"{stat.std:.4f}",
                        stat.n,
                        int(row in table.best.get(column, set())),
                        "" if found is None else f"{found.percent:.2f}",
                        "" if found is None else found.other,
                        "" if ref is None else f"{ref[0].mean:.2f}",
                        "" if ref is None or math.isnan(ref[0].std) else f"{ref[0].std:.2f}",
                        "" if ref is None else ref[1].source,
                    ]
                )
    return out.getvalue()
