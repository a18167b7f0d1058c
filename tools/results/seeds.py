"""Per-seed tables of the study READMEs (``results_studies.py``): a row's runs, each seed's best / last-10,
paired gains seed by seed, and their mean ± sample std, through the helpers of ``results_common``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fedaug.engine.checkpoint import logged_round_times
from fedaug.results.store import Run, Stat
from tools.results.common import BEST, LAST10, Archive, cell, gain_cell, slash, try_gain
from tools.results.fragments import Gain, Metric, canonical, markdown_table


def signed(value: float, digits: int = 1) -> str:
    """``value`` with its sign, rounded; a value that rounds to zero is ``+0.0``, never ``-0.0``."""
    return f"{round(value, digits) + 0.0:+.{digits}f}"


def paper_text(stat_: Stat | None) -> str:
    """A published ``mean ± std`` as the paper prints it; ``-`` where it has none."""
    return "-" if stat_ is None else f"{stat_.mean:g} ± {stat_.std:g}"


RowSpec = tuple[Sequence[str], str, str]
"""Where a table row's runs are: the studies (in precedence order), the report row and the setting."""


def best_at(run: Run) -> str:
    """Best accuracy and, in brackets, its round."""
    return f"{BEST(run):.2f} ({run.summary['best_round']})"


def seed_run(archive: Archive, spec: RowSpec, seed: int, device: str = "CPU") -> Run | None:
    return canonical(archive.runs(*spec), device).get(seed)


def on(archive: Archive, spec: RowSpec, seeds: Sequence[int], device: str = "CPU") -> list[Run]:
    """The canonical runs of ``spec`` on ``seeds`` (of one device class)."""
    return [run for seed, run in canonical(archive.runs(*spec), device).items() if seed in seeds]


def round_minutes(run: Run) -> str:
    """The run's logged round times summed, in minutes (``-`` where it logged none)."""
    times = [seconds for _, seconds in logged_round_times(run.path)]
    return f"{sum(times) / 60:.0f} min" if times else "-"


def best_last(run: Run | None, rounds: bool = False) -> str:
    """``best / last-10`` of one run (with the best round when ``rounds``); ``-`` without a run."""
    if run is None:
        return "-"
    return f"{best_at(run) if rounds else f'{BEST(run):.2f}'} / {LAST10(run):.2f}"


def runs_table(
    archive: Archive, rows: Mapping[str, RowSpec], seeds: Sequence[int], device: str = "CPU"
) -> str:
    """Per row: each seed's best (round) / last-10 and their mean ± std over the seeds (one device class)."""
    body = []
    for name, spec in rows.items():
        cells = [best_last(seed_run(archive, spec, s, device), rounds=True) for s in seeds]
        body.append([name, *cells, cell(on(archive, spec, seeds, device), BEST, LAST10, device=device)])
    return markdown_table(["run", *(f"seed {s}" for s in seeds), "mean ± std"], body)


def _gain(
    archive: Archive, spec: RowSpec, base: RowSpec, metric: Metric, seeds: Sequence[int]
) -> Gain | None:
    """The paired gain over ``seeds``; every archived baseline run is offered, so that a seed pairs with the
    baseline's run on the method's CPU model where one is archived (docs/results.md)."""
    baseline = [run for run in archive.runs(*base) if run.seed in seeds]
    return try_gain(on(archive, spec, seeds), baseline, metric)


def pair_table(
    archive: Archive, names: tuple[str, str], spec: RowSpec, base: RowSpec, seeds: Sequence[int]
) -> str:
    """Seed by seed, a method and its baseline (best / last-10) and the method's gain; then mean ± std."""
    gains = [_gain(archive, spec, base, m, seeds) for m in (BEST, LAST10)]
    body = []
    for s in seeds:
        per_seed = [f"{g.values[s]:+.2f}" if g is not None and s in g.values else "-" for g in gains]
        body.append(
            [str(s), best_last(seed_run(archive, base, s)), best_last(seed_run(archive, spec, s)), *per_seed]
        )
    mean = [cell(on(archive, x, seeds), BEST, LAST10) for x in (base, spec)]
    body.append(["mean ± std", *mean, *(gain_cell(g) for g in gains)])
    header = ["seed", names[1], names[0], f"{names[0]} - {names[1]}, best", "last-10"]
    return markdown_table(header, body)


def seeds_gain_table(
    archive: Archive, rows: Mapping[str, RowSpec], base: RowSpec, seeds: Sequence[int]
) -> str:
    """Per row: each seed's best / last-10 and its gains over ``base`` paired by seed (``/``-separated)."""
    body = []
    for name, spec in rows.items():
        cells = [best_last(seed_run(archive, spec, s)) for s in seeds]
        gains = []
        for metric in (BEST, LAST10):
            gain = _gain(archive, spec, base, metric, seeds) if spec != base else None
            gains.append(
                "" if gain is None else slash([f"{gain.values[s]:+.2f}" for s in seeds if s in gain.values])
            )
        body.append([name, *cells, *gains])
    listed = " / ".join(map(str, seeds))
    header = ["method", *(f"seed {s}" for s in seeds)]
    header += [f"gain over FedAvg, best, seeds {listed}", f"gain over FedAvg, last-10, seeds {listed}"]
    return markdown_table(header, body)


def variants_table(
    archive: Archive, rows: Mapping[str, RowSpec], base: RowSpec, seeds: Sequence[int], title: str
) -> str:
    """Per row, seed by seed (``/``-separated): best, last-10 (their mean ± std) and the last-10 gain over
    ``base`` paired by seed (its mean ± std)."""
    body = []
    for name, spec in rows.items():
        runs = [seed_run(archive, spec, s) for s in seeds]
        best = slash([f"{BEST(r):.2f}" if r else "-" for r in runs])
        last = slash([f"{LAST10(r):.2f}" if r else "-" for r in runs])
        last += f" ({cell(on(archive, spec, seeds), LAST10)})"
        gain = None if spec == base else _gain(archive, spec, base, LAST10, seeds)
        paired = "" if gain is None else slash([f"{gain.values[s]:+.2f}" for s in seeds if s in gain.values])
        body.append([name, best, last, f"{paired} ({gain_cell(gain)})" if gain else ""])
    header = [
        title,
        "best %",
        "last-10 % (mean ± std)",
        "last-10 gain over FedAvg, paired, points (mean ± std)",
    ]
    return markdown_table(header, body)


def gains_by_seed(archive: Archive, rows: Mapping[str, tuple[RowSpec, RowSpec]], seeds: Sequence[int]) -> str:
    """Per row (a method and its baseline): each seed's paired gain, best / last-10, and their mean ± std."""
    body = []
    for name, (spec, base) in rows.items():
        gains = [_gain(archive, spec, base, metric, seeds) for metric in (BEST, LAST10)]
        cells = []
        for s in seeds:
            values = [g.values.get(s) if g is not None else None for g in gains]
            cells.append("-" if None in values else slash([f"{v:+.2f}" for v in values if v is not None]))
        body.append([name, *cells, slash([gain_cell(g) for g in gains])])
    return markdown_table(["gain, best / last-10", *(f"seed {s}" for s in seeds), "mean ± std"], body)
