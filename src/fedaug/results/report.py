"""``fedaug report``: run dirs -> tables (Markdown, CSV, LaTeX) and plots, without training anything."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fedaug import registry
from fedaug.errors import ConfigError, FedaugError
from fedaug.results import plots as figures
from fedaug.results.fairness_plot import plot_fairness
from fedaug.results.reference import ReferenceTable, load_reference
from fedaug.results.stand_ins import stand_in_model_notes, stand_in_notes
from fedaug.results.store import Grouping, Run, group_runs, load_runs
from fedaug.results.tables import (
    FAIRNESS_METRICS,
    NOT_COMPARED,
    Table,
    build_table,
    gain_table,
    resolve_row,
    to_csv,
    to_latex,
    to_markdown,
)
from fedaug.runtime.figure_files import pdf_copies
from fedaug.runtime.paths import check_folder_target

logger = logging.getLogger(__name__)

FORMATS = ("md", "csv", "tex")


@dataclass
class ReportOutputs:
    """What a report produced: texts to print (when no ``out_dir`` was given) and files written."""

    printed: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)


def build_tables(
    grouping: Grouping,
    *,
    highlight: str | None = None,
    exclude: Sequence[str] = NOT_COMPARED,
    reference: Sequence[ReferenceTable] = (),
    baseline: str | None = None,
) -> list[Table]:
    """The best-accuracy and last-10 tables of ``grouping``, plus Fed-ZDA's fairness tables (local test mean
    and variance across clients, global accuracy and variance across classes) when runs have local test sets.

    With a ``baseline`` method (or row label) each table is followed by its :func:`gain_table` (paired by
    seed).
    """
    metrics = ["best_acc", "last10_acc"]
    runs = [run for cell in grouping.cells.values() for run in cell]
    if any("local_acc_mean_final" in run.summary for run in runs):  # the fairness tables the runs have
        metrics += [m for m in FAIRNESS_METRICS if any(m in run.summary for run in runs)]
    tables = []
    base_row = None if baseline is None else resolve_row(grouping, baseline)
    for metric in metrics:
        table = build_table(grouping, metric, highlight=highlight, exclude=exclude, reference=reference)
        tables.append(table)
        if base_row is not None:
            tables.append(gain_table(table, base_row))
    return tables


def render(tables: Sequence[Table], fmt: str, *, title: str = "") -> str:
    """All ``tables`` in one document of format ``md``, ``csv`` or ``tex``."""
    if fmt == "csv":
        return to_csv(tables)
    if fmt == "tex":
        return "\n".join(to_latex(t) for t in tables)
    heading = f"# {title}\n\n" if title else ""
    return heading + "\n".join(to_markdown(t) for t in tables)


def _summary_line(grouping: Grouping, runs_dir: str) -> str:
    runs = [r for cell in grouping.cells.values() for r in cell]
    unfinished = sum(not r.finished for r in runs)
    rounds = sorted({int(r.summary["rounds"]) for r in runs})
    shape = f"{_count(len(grouping.rows), 'method')} x {_count(len(grouping.columns), 'setting')}"
    text = f"{len(runs)} runs from `{runs_dir}`: {shape}, rounds {', '.join(map(str, rounds))}"
    text += f" ({unfinished} unfinished runs included)" if unfinished else ""
    notes = "".join(f"\n\nData: {note}." for note in stand_in_notes(r.config for r in runs))
    notes += "".join(f"\n\nModel: {note}." for note in stand_in_model_notes(r.config for r in runs))
    return text + f"; ran on: {_cpu_counts(runs)}" + notes


def _count(number: int, noun: str) -> str:
    """``1 method``, ``2 methods``."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _cpu_counts(runs: Sequence[Run]) -> str:
    """How many runs ran on each CPU model or GPU (``env.json``), most first.

    A seed's runs on different processors do not share their float rounding (:mod:`fedaug.runtime.machine`),
    so a
    paired gain between them holds that drift too.
    """
    counts = Counter(run.cpu or "not recorded" for run in runs)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{cpu} ({n})" for cpu, n in ranked)


def _check_formats(formats: Sequence[str]) -> None:
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ConfigError(f"--format must be a comma-separated subset of {', '.join(FORMATS)}, got {formats}")


def _only_methods(runs: list[Run], methods: Sequence[str], runs_dir: str) -> list[Run]:
    """The runs of ``methods``; every listed method must have at least one."""
    present = sorted({run.method for run in runs})
    missing = [m for m in methods if m not in present]
    if missing:
        raise FedaugError(
            f"no runs of method(s) {', '.join(missing)} under {runs_dir}; methods with runs: "
            f"{', '.join(present) or 'none'}"
        )
    return [run for run in runs if run.method in methods]


def write_report(
    runs_dir: Path | Sequence[Path],
    *,
    formats: Sequence[str] = ("md",),
    out_dir: Path | None = None,
    reference: Path | None = None,
    highlight: str | None = None,
    exclude: Sequence[str] = NOT_COMPARED,
    include_unfinished: bool = False,
    plots: bool = False,
    heatmaps: bool = False,
    methods: Sequence[str] | None = None,
    baseline: str | None = None,
    pdf: bool = False,
) -> ReportOutputs:
    """Reads every run dir under ``runs_dir`` and writes (or returns for printing) its tables and plots.

    Args:
        runs_dir: a folder holding run dirs (searched at any depth), or several (e.g. live runs and an
            archive of earlier ones, :mod:`fedaug.results.archive`): a run whose method, setting and seed
            appeared in an earlier folder is ignored with a warning, so the first folder wins.
        formats: any of ``md``, ``csv``, ``tex``.
        out_dir: write ``report.<format>`` here; None returns the texts in ``printed`` instead.
        reference: a published-numbers YAML (see :mod:`fedaug.results.reference`).
        highlight: a method (or row label) compared with the best other row of each setting.
        exclude: methods never counted as the best other (default: the bounds, FedData as the papers, and
            the reference runs ``local`` and ``centralized``).
        include_unfinished: also use runs without a final ``summary.json`` (their numbers so far).
        plots: write learning curves, FLea dCor/exposure curves and the Beta density (with FLea runs),
            hyper-parameter plots and the fairness figure (with local accuracies) under
            ``<out_dir or runs_dir/report>/plots``.
        heatmaps: also write partition heat-maps (loads each setting's dataset labels).
        methods: only the runs of these methods (None: every run).
        baseline: a method (or row label); each accuracy table is followed by every row's gain over it,
            ours beside the paper's (:func:`fedaug.results.tables.gain_table`).
        pdf: also write a PDF copy of each plot (default: PNG only, :mod:`fedaug.runtime.figure_files`).

    Raises:
        FedaugError: for a bad format, a missing folder, no runs with results, a method in ``methods``
            without runs, a ``baseline`` or ``highlight`` that no row names, or an ``exclude`` name that is
            neither a registered method nor a row.
    """
    _check_formats(formats)
    if out_dir is not None:
        check_folder_target(out_dir, "--out")
    published = load_reference(reference) if reference else ()  # a bad file refused before runs are read
    dirs = [runs_dir] if isinstance(runs_dir, Path) else list(runs_dir)
    where = ", ".join(str(d) for d in dirs)
    runs = [run for d in dirs for run in load_runs(d, include_unfinished=include_unfinished)]
    if methods is not None:
        runs = _only_methods(runs, methods, where)
    if not runs:
        raise FedaugError(
            f"no run dirs with results under {where} (unfinished ones need --include-unfinished)"
        )
    grouping = group_runs(runs)
    for option, name in (("--baseline", baseline), ("--highlight", highlight)):
        if name is not None and resolve_row(grouping, name) is None:
            raise FedaugError(f"{option} {name}: no such method among {', '.join(grouping.rows)}")
    methods_known = set(registry.available("method"))
    for name in exclude:  # absent from these runs is fine (the defaults often are); a typo is not
        if name not in methods_known and resolve_row(grouping, name) is None:
            raise FedaugError(
                f"--exclude {name}: not a method; methods with runs here: {', '.join(grouping.rows)}"
            )
    tables = build_tables(
        grouping,
        highlight=highlight,
        exclude=exclude,
        reference=published,
        baseline=baseline,
    )
    if reference and not any(t.reference for t in tables):
        logger.warning("no published number in %s matches these settings and methods", reference)
    outputs = write_texts(tables, formats, out_dir, title=_summary_line(grouping, where))
    plot_dir = (out_dir or dirs[0] / "report") / "plots"
    with pdf_copies(pdf):
        if plots:
            outputs.files += write_plots(grouping, plot_dir)
            if baseline is not None:
                outputs.files += figures.plot_gains(tables, str(resolve_row(grouping, baseline)), plot_dir)
        if heatmaps:
            outputs.files += figures.plot_heatmaps(grouping, plot_dir)
    return outputs


def write_texts(
    tables: Sequence[Table], formats: Sequence[str], out_dir: Path | None, *, title: str = ""
) -> ReportOutputs:
    """Renders ``tables`` in every format: into ``out_dir/report.<format>``, or for printing if None."""
    outputs = ReportOutputs()
    for fmt in formats:
        text = render(tables, fmt, title=title)
        if out_dir is None:
            outputs.printed.append(text)
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"report.{fmt}"
        path.write_text(text)
        outputs.files.append(path)
    return outputs


def write_plots(grouping: Grouping, plot_dir: Path) -> list[Path]:
    """Curves, hyper-parameter plots and, with FLea runs, the Beta density of ``grouping`` (PNG; a PDF copy
    inside :func:`~fedaug.runtime.figure_files.pdf_copies`)."""
    files = figures.plot_learning_curves(grouping, plot_dir)
    files += figures.plot_flea_curves(grouping, plot_dir)
    if any(method.startswith("flea") for method, _ in grouping.row_info.values()):
        files += figures.plot_beta_density(plot_dir / "beta_density")
    files += figures.plot_hparams(grouping, plot_dir)
    files += plot_fairness(grouping, plot_dir)
    return files
