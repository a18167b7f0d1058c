"""The shared part of ``tools/results/__main__.py``: the archive reader, the fragment registry and cell
helpers.

:class:`Archive` reads the runs archived under ``studies/`` through :mod:`fedaug.results.store`; a fragment is
a function registered with :func:`fragment` under the name of its ``<!-- results:NAME -->`` block; a README
headline row is a function registered with :func:`headline_row`. The study-specific fragments live in
``results_flea.py``, ``results_others.py`` and ``results_readme.py`` beside this file, the study READMEs' in
``results_studies*.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedaug.results.reference import PUBLISHED, load_reference, lookup
from fedaug.results.store import Run, Stat, aggregate, load_runs, row_label, setting_label
from tools.results.fragments import (
    REFERENCE_CPU,
    Gain,
    Metric,
    canonical,
    cpu_name,
    fmt,
    paired_gain,
    seeds_text,
    summary_metric,
)

ROOT = Path(__file__).resolve().parents[2]
STUDIES = ROOT / "studies"

BEST, LAST10, FINAL = (
    summary_metric("best_acc"),
    summary_metric("last10_acc"),
    summary_metric("global_acc_final"),
)
GLOBAL_LAST10 = summary_metric("global_acc_last10")
CLASS_VAR = summary_metric("class_acc_var_final", 1e4)
CLASS_VAR_LAST10 = summary_metric("class_acc_var_last10", 1e4)
LOCAL_MEAN, LOCAL_VAR = summary_metric("local_acc_mean_final"), summary_metric("local_acc_var_final", 1e4)
LOCAL_VAR_LAST10 = summary_metric("local_acc_var_last10", 1e4)

ROW_ALIASES = {"flea_eq6 (decor_form=dcor, decor_schedule=official, local_ce_weight=1.0)": "flea"}
"""Runs archived before ``flea``'s default changed record the options that are today's ``flea``."""

HAR_SPLITS = ("Qua(2)", "Dir(0.3)", "Dir(0.1)")
UCI_CPU = (
    "flea_objective_har/runs",
    "flea_table1_har/cpu_dir03/runs",
    "baselines_har/runs",
    "flea_k150_har/runs",
)
"""The UCI-HAR CPU archives (each a study's ``runs`` folder), in precedence order for a seed archived twice
on the same CPU model."""
GPU_GRIDS = {
    "H100, grid 1": "flea_table1_har/h100/runs",
    "H100, grid 2": "flea_table1_har/h100_one_call/runs",
    "H200": "flea_table1_har/h200/runs",
}

Fragment = Callable[["Archive"], str]
FRAGMENTS: dict[str, Fragment] = {}


def fragment(name: str) -> Callable[[Fragment], Fragment]:
    """Registers the generator of the block ``<!-- results:name -->``."""

    def register(function: Fragment) -> Fragment:
        FRAGMENTS[name] = function
        return function

    return register


class Archive:
    """The archived runs of ``studies/``, read once per study folder."""

    def __init__(self, root: Path = STUDIES) -> None:
        self.root = root
        self._runs: dict[str, list[Run]] = {}
        self.reference = load_reference(PUBLISHED)

    def study(self, name: str) -> list[Run]:
        """Every finished run archived under ``studies/<name>``."""
        if name not in self._runs:
            self._runs[name] = load_runs(self.root / name)
        return self._runs[name]

    def runs(self, studies: Sequence[str], row: str, setting: str) -> list[Run]:
        """The runs of ``row`` (a report row label, aliases resolved) in ``setting`` (e.g. ``uci_har Qua(2)
        K=75``), in the order of ``studies``."""
        return [
            r
            for s in studies
            for r in self.study(s)
            if label(r) == row and setting_label(r.config) == setting
        ]

    def paper(self, metric: str, method: str, runs: Sequence[Run]) -> Stat | None:
        """The published ``metric`` of ``method`` in the setting of ``runs`` (None: no paper number)."""
        found = lookup(self.reference, metric, method, runs[0].config) if runs else None
        return found[0] if found else None


def label(run: Run) -> str:
    """The run's report row, with :data:`ROW_ALIASES` applied."""
    return ROW_ALIASES.get(row_label(run), row_label(run))


def har(split: str, clients: int = 75) -> str:
    return f"uci_har {split} K={clients}"


FLEA_ROWS = {
    "FedAvg": "fedavg",
    "`flea_eq6` (Eq. 6 as printed)": "flea_eq6",
    "`flea_eq6` + local CE": "flea_eq6 (local_ce_weight=1.0)",
    "`flea` (default: + local CE, unsquared dCor, lambda2 3 -> 1)": "flea",
    "`flea_official`": "flea_official",
}

K150_SPLITS = {
    **{s: har(s, 150) for s in HAR_SPLITS},
    "Dir(0.1), the authors' two halves": har("Dir(0.1, 2, 3, 100000)", 150),
}

FSDD = ("flea_fsdd/runs",)
FSDD_SPLITS = ("Qua(3)", "Dir(0.5)", "Dir(0.1)")
FSDD_BASELINE_ROWS = {
    "FedAvg": "fedavg",
    "FedProx": "fedprox",
    "FedLC": "fedlc",
    "CCVR (shared features)": "ccvr (variant=shared_features)",
    "FedMix": "fedmix",
    "FedData (raw data shared)": "feddata",
    "`flea`": "flea",
}

BASELINES = ("baselines_har/runs",)
BASELINE_ROWS = (
    *("fedavg", "fedprox", "feddecorr", "fedlc", "fedntd", "fedbr", "ccvr (variant=shared_features)"),
    *("fedgen", "fedmix", "fedrs", "feddata"),
)

ZDA = ("fedzda/runs",)
ZDA_CELLS = {
    "MNIST unimodal": "mnist Shards(2) K=100",
    "MNIST multimodal": "mnist multimodal(2, clients) K=100",
    "FMNIST unimodal": "fashion_mnist Shards(2) K=100",
    "FMNIST multimodal": "fashion_mnist multimodal(2, clients) K=100",
}
ZDA_ROWS = (
    "fedavg",
    "fedprox",
    "qffl (q=0.01)",
    "qffl",
    "fedzdac",
    "fedzdas",
    "fedzdas (server_batch_size=10)",
)

AUGMIX = ("fedaugmix/table3/runs",)
AUGMIX_ROWS = ("fedavg", "fedaugmix", "fedprox", "fedprox_augmix")

K75, K150 = [har(s) for s in HAR_SPLITS], [har(s, 150) for s in HAR_SPLITS]
FLEA_METHODS = (
    ("FedAvg", "fedavg"),
    ("`flea`", "flea"),
    ("`flea_eq6`", "flea_eq6"),
    ("`flea_official`", "flea_official"),
)


def stat(runs: Sequence[Run], metric: Metric, device: str = "CPU") -> Stat | None:
    chosen = canonical(runs, device)
    return aggregate([metric(r) for r in chosen.values()]) if chosen else None


def cell(runs: Sequence[Run], *metrics: Metric, device: str = "CPU") -> str:
    """``mean ± std`` of each metric over the canonical seeds, joined by `` / ``; ``-`` without runs."""
    stats = [stat(runs, m, device) for m in metrics]
    return " / ".join(fmt(s) for s in stats if s is not None) or "-"


def gain_cell(gain: Gain | None, *, count: bool = False) -> str:
    if gain is None:
        return "-"
    text = fmt(gain.stat, sign=True)
    text += "‡" if gain.cross_cpu else ""
    return text + (f", {gain.above_zero()} of {len(gain.values)} seeds" if count else "")


def try_gain(
    method: Sequence[Run], baseline: Sequence[Run], metric: Metric, device: str = "CPU"
) -> Gain | None:
    if not canonical(method, device) or not canonical(baseline, device):
        return None
    return paired_gain(method, baseline, metric, device)


def on_seeds(runs: Sequence[Run], gain: Gain | None) -> list[Run]:
    """``runs`` of the seeds ``gain`` paired (all of them without a gain): comparisons over the same seeds."""
    return [r for r in runs if gain is None or r.seed in gain.values]


def json_cell(
    entry: Mapping[str, Any] | None, digits: int, *, scale: float = 1.0, unit: str = "", count: bool = False
) -> str:
    """``mean ± std`` of a statistic as the attack commands' JSON holds it (``mean``, ``std``, ``n``), times
    ``scale``, then ``unit`` and, when ``count``, its seed count (`` (n = 3)``); a dash where there is
    none."""
    if not entry:
        return "–"
    value = Stat(entry["mean"] * scale, (entry["std"] or 0.0) * scale, entry["n"])
    text = fmt(value, digits) + unit
    return f"{text} (n = {value.n})" if count else text


def paper_cell(stat_: Stat | None) -> str:
    return "-" if stat_ is None else f"{stat_.mean:.2f}"


def seeds_of(runs: Sequence[Run], device: str = "CPU") -> str:
    chosen = canonical(runs, device)
    return seeds_text(chosen) if chosen else "-"


def _article(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def off_reference(cells: Mapping[str, Sequence[Run]]) -> str:
    """A line naming the canonical runs not on :data:`REFERENCE_CPU`, cell by cell ('' if none): the rule
    of docs/results.md uses them where a seed has no run on the reference CPU, and says so."""
    groups: dict[str, list[str]] = {}
    for name, runs in cells.items():
        by_cpu: dict[str, list[int]] = {}
        for seed, run in canonical(runs).items():
            if run.cpu != REFERENCE_CPU:
                by_cpu.setdefault(cpu_name(run), []).append(seed)
        if by_cpu:
            where = ", ".join(
                f"{seeds_text(seeds)} on {_article(cpu)}" for cpu, seeds in sorted(by_cpu.items())
            )
            groups.setdefault(where, []).append(name)
    if not groups:
        return ""
    parts = [
        f"{where} ({'every cell' if len(names) == len(cells) else ', '.join(names)})"
        for where, names in groups.items()
    ]
    return f"\nCanonical runs not on the {REFERENCE_CPU}: " + "; ".join(parts) + ".\n"


def slash(values: Sequence[str]) -> str:
    return " / ".join(values)


def means(archive: Archive, studies: Sequence[str], row: str, settings: Sequence[str], metric: Metric) -> str:
    return slash([cell(archive.runs(studies, row, x), metric) for x in settings])


def gains_text(
    archive: Archive,
    studies: Sequence[str],
    row: str,
    base: str,
    settings: Sequence[str],
    metric: Metric,
    device: str = "CPU",
) -> str:
    return slash(
        [
            gain_cell(try_gain(archive.runs(studies, row, x), archive.runs(studies, base, x), metric, device))
            for x in settings
        ]
    )


def papers(
    archive: Archive, metric: str, method: str, studies: Sequence[str], settings: Sequence[str]
) -> str:
    return slash(
        [paper_cell(archive.paper(metric, method, archive.runs(studies, "fedavg", x))) for x in settings]
    )


def paper_gap(
    archive: Archive, metric: str, method: str, base: str, runs: Sequence[Run], spec: str = "+.2f"
) -> str:
    gap = [archive.paper(metric, m, runs) for m in (method, base)]
    return "-" if gap[0] is None or gap[1] is None else format(gap[0].mean - gap[1].mean, spec)


HeadlineRow = Callable[["Archive"], list[list[str]]]
HEADLINE_ROWS: list[HeadlineRow] = []
"""The README table's rows in order; a study adds one with :func:`headline_row`."""


def headline_row(function: HeadlineRow) -> HeadlineRow:
    """Registers a function giving README rows: ``[study and setting, statistic, ours, paper]`` each."""
    HEADLINE_ROWS.append(function)
    return function


def listing(items: Sequence[str]) -> str:
    if not items:
        return "none"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def split_names(settings: Sequence[str]) -> list[str]:
    return [s.split(" ")[1] for s in settings]


def list_item(text: str, indent: str = "  ") -> str:
    """``text`` indented as the list item it sits in, and the closing marker after it too (the trailing
    ``indent``), so that Markdown keeps a generated block inside its item."""
    return "".join(f"{indent}{line}\n" for line in text.splitlines()) + indent
