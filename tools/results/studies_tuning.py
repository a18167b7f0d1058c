"""The generated block of ``studies/flea_har_tuning/README.md`` (issue #65 (c)): each baseline's seed-0
search on UCI-HAR Qua(2), K = 75, as FLea's Appendix C.3 tuned its baselines, and the value it chooses.

The searched values come from the campaign file's ``flea_har_tuning`` grid (one option per method entry),
the method's default from its config (its seed-0 run archived by the UCI-HAR table studies). A value is
chosen by the paper's statistic, the best test accuracy over the 100 rounds ("We run 100 communications
and take the best accuracy as the final result", Appendix C.2), on seed 0 alone, once every value of the
method has a seed-0 run; ties go to the value listed first (the default first). Seeds 1-2 then run the
chosen value, and the tables say that seed 0 chose it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fedaug.results.store import Run, method_defaults, setting_label
from tools.campaign.spec import read_campaign
from tools.results import common
from tools.results.common import BEST, LAST10, Archive, fragment, har
from tools.results.fragments import canonical, markdown_table

GRID = "flea_har_tuning"
"""The campaign grid of the seed-0 search."""
SETTING = har("Qua(2)")
SEARCH_STUDIES = ("flea_har_tuning/runs", *common.UCI_CPU, "flea_table1_har/runs")
"""Where the search's runs lie: its own, then the table studies that hold each default's seed 0."""
CHOSEN = common.STUDIES / "flea_har_tuning" / "chosen.json"
"""The chosen values as a grid axis (``{"method": [{name: ..., option: value}, ...]}``, the methods decided
so far), which the campaign's ``flea_har_tuned_seeds12`` grid reads (``axes_from``) to run on seeds 1-2."""


@dataclass(frozen=True)
class Search:
    """One method's searched option: its name, the values (the default first) and which is the default."""

    method: str
    option: str
    values: tuple[Any, ...]
    default: Any


def searches(grid_method: Sequence[Any]) -> list[Search]:
    """The searched option of each method of a grid's ``method`` axis (entries ``{name: m, option: v}``),
    in the grid's order; the method's default value first.

    Raises:
        ValueError: an entry that sets no option or more than one, or two options for one method.
    """
    found: dict[str, tuple[str, list[Any]]] = {}
    for entry in grid_method:
        if not isinstance(entry, Mapping) or len(entry) != 2 or "name" not in entry:
            raise ValueError(f"{GRID}: a method entry must set exactly one option, got {entry!r}")
        name = str(entry["name"])
        ((option, value),) = ((k, v) for k, v in entry.items() if k != "name")
        held = found.setdefault(name, (str(option), []))
        if held[0] != option:
            raise ValueError(f"{GRID}: {name} searches {held[0]} and {option}; one option per method")
        held[1].append(value)
    result = []
    for name, (option, values) in found.items():
        default = method_defaults(name).get(option)
        ordered = [default, *(v for v in values if v != default)]
        result.append(Search(name, option, tuple(ordered), default))
    return result


def searched_runs(archive: Archive, setting: str = SETTING) -> list[Run]:
    """The runs of ``setting`` archived in :data:`SEARCH_STUDIES` (a study not archived yet: none)."""
    return [
        run
        for study in SEARCH_STUDIES
        if (archive.root / study).is_dir()
        for run in archive.study(study)
        if setting_label(run.config) == setting
    ]


def at_value(runs: Sequence[Run], search: Search, value: Any) -> list[Run]:
    """The runs of ``search.method`` with ``search.option`` at ``value`` and every other option at its
    default."""
    return [
        run
        for run in runs
        if run.method == search.method
        and set(run.method_options) <= {search.option}
        and run.config.get(f"method.{search.option}") == value
    ]


def seed0_run(archive: Archive, search: Search, value: Any) -> Run | None:
    """The seed-0 run of ``search`` at ``value`` (:func:`at_value`) in :data:`SETTING` (the reference CPU's
    where two CPUs ran it)."""
    return canonical(r for r in at_value(searched_runs(archive), search, value) if r.seed == 0).get(0)


def chosen(archive: Archive, search: Search) -> Any | None:
    """The value of ``search`` with the best seed-0 best accuracy (None: some value has no seed-0 run)."""
    runs = [seed0_run(archive, search, value) for value in search.values]
    found = [run for run in runs if run is not None]
    if len(found) < len(runs):
        return None
    best = max(range(len(found)), key=lambda i: (BEST(found[i]), -i))
    return search.values[best]


@fragment("har-tuning")
def har_tuning(archive: Archive) -> str:
    """Per method and value: seed 0's best / last-10 test accuracy (%) and the value chosen by the best."""
    grid = read_campaign(archive.root / "campaign.yaml").grid(GRID)
    rows = []
    fedavg = canonical(r for r in searched_runs(archive) if r.method == "fedavg" and not r.method_options)
    fedavg_run = fedavg.get(0)
    rows.append(["FedAvg", "-", _cell(fedavg_run), "(reference)"])
    for search in searches(grid.axes["method"]):
        pick = chosen(archive, search)
        runs = [seed0_run(archive, search, value) for value in search.values]
        left = sum(run is None for run in runs)
        for value, run in zip(search.values, runs, strict=True):
            shown = f"{search.option}={value:g}" + (" (default)" if value == search.default else "")
            verdict = "**chosen**" if pick is not None and value == pick else ""
            if pick is None and value == search.values[0]:
                verdict = f"pending: {left} of {len(runs)} values to run"
            rows.append([search.method, shown, _cell(run), verdict])
    header = ["method", "value", "best / last-10, seed 0", "choice (by best, seed 0)"]
    return markdown_table(header, rows)


def _cell(run: Run | None) -> str:
    if run is None:
        return "-"
    return f"{BEST(run):.2f} / {LAST10(run):.2f}"


def chosen_text(archive: Archive) -> str:
    """:data:`CHOSEN`'s content: each decided method's chosen value as a method entry, in the grid's order."""
    grid = read_campaign(archive.root / "campaign.yaml").grid(GRID)
    entries = []
    for search in searches(grid.axes["method"]):
        pick = chosen(archive, search)
        if pick is not None:
            entries.append({"name": search.method, search.option: pick})
    return json.dumps({"method": entries}, indent=1) + "\n"


def stale() -> list[str]:
    """One line naming :data:`CHOSEN` if it differs from what the archives choose, else none."""
    text = chosen_text(Archive())
    if CHOSEN.is_file() and CHOSEN.read_text() == text:
        return []
    return [f"{CHOSEN.relative_to(common.ROOT)}: differs from the values the archived seed-0 search chooses"]


def write() -> None:
    """Writes :data:`CHOSEN` from the archives."""
    CHOSEN.parent.mkdir(parents=True, exist_ok=True)
    CHOSEN.write_text(chosen_text(Archive()))


TUNED_SPLITS = ("Qua(2)", "Dir(0.3)", "Dir(0.1)")
"""The K = 75 splits the chosen values run on: Qua(2), where seed 0 chose them (seeds 1-2:
``flea_har_tuned_seeds12``), and the rest of FLea Table 1's column (``flea_table1_har_tuned``)."""


@fragment("har-tuned-gains")
def har_tuned_gains(archive: Archive) -> str:
    """Each decided method at the value seed 0 chose on Qua(2), against FedAvg paired by seed on every split
    it has runs of, beside the default's gain and the paper's (which tuned its baselines)."""
    grid = read_campaign(archive.root / "campaign.yaml").grid(GRID)
    picks = [(search, chosen(archive, search)) for search in searches(grid.axes["method"])]
    rows = []
    for split in TUNED_SPLITS:
        found = searched_runs(archive, har(split))
        rows += _tuned_rows(archive, split, found, [(s, p) for s, p in picks if p is not None])
    if not rows:
        return "No method's value is chosen yet (each needs a seed-0 run of all its values).\n"
    header = [
        "method at the value seed 0 chose",
        "split",
        "seeds",
        "best - FedAvg, paired",
        "last-10 - FedAvg",
    ]
    header += ["default's best - FedAvg", "paper, best - FedAvg"]
    return markdown_table(header, rows)


def _tuned_rows(
    archive: Archive, split: str, found: Sequence[Run], picks: Sequence[tuple[Search, Any]]
) -> list[list[str]]:
    """One split's rows: each chosen value with runs there (on Qua(2) always: its seed 0 is the search's)."""
    fedavg = [r for r in found if r.method == "fedavg" and not r.method_options]
    rows = []
    for search, pick in picks:
        tuned, default = (at_value(found, search, value) for value in (pick, search.default))
        if not tuned and split != TUNED_SPLITS[0]:
            continue
        best, last = (common.try_gain(tuned, fedavg, m) for m in (BEST, LAST10))
        rows.append(
            [
                f"`{search.method}` {search.option}={pick:g}"
                + (" (the default)" if pick == search.default else ""),
                split,
                common.seeds_of(tuned),
                common.gain_cell(best, count=True),
                common.gain_cell(last, count=True),
                common.gain_cell(common.try_gain(default, fedavg, BEST)),
                common.paper_gap(archive, "best_acc", search.method, "fedavg", tuned),
            ]
        )
    return rows
