"""The DP frontier's verdict (issue #67, ``studies/privacy_dp/README.md``): which FLea setting, if any, is
more private than FedMix under the same epsilon and more accurate than FedAvg, and so the ``flea_private``
recommendation.

Per data set and FLea setting (split layer, epsilon), from the archived runs and attack outputs of the study:

- **more accurate than FedAvg**: the last-10 test accuracy's gain over FedAvg's archived runs, paired by seed,
  above zero by more than its sample std (:func:`tools.results.fragments.beats`; no claim with one seed);
- **more private than FedMix at the same epsilon**: against the attacker's best decoder (the lower of the
  two decoders' MSE, per seed), the reconstruction MSE above FedMix's (its attacker's estimate from the
  noised averages) by more than the paired difference's sample std, and the context attack needing at
  least as many samples for 90% as against FedMix's, on the mean over seeds.

A setting that meets both is a candidate; the recommendation is the most accurate candidate of the data set
with three seeds (Fashion-MNIST; UCI-HAR has seed 0 only, so no paired claim). Without a candidate the
verdict says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fedaug.attacks.aggregate import Reports, load_reports, run_key
from fedaug.attacks.frontier import FEDMIX_GUESS
from fedaug.results.store import Run, load_runs
from tools.results.common import LAST10, Archive, fragment
from tools.results.fragments import Gain, beats, fmt, markdown_table

EPSILONS = ("inf", "8", "4", "2", "1")
LAYERS = (1, 2)
DECODERS = ("conv4", "deep")


@dataclass(frozen=True)
class Dataset:
    """One frontier: its name in the study's folders, its runs' data-partition folder and FedAvg's runs."""

    key: str
    title: str
    tail: str
    fedavg: str
    """FedAvg's archived runs (under ``studies/``) that the accuracy is paired with."""


DATASETS = (
    Dataset(
        "fmnist",
        "Fashion-MNIST",
        "fashion_mnist-quantity3-K100",
        "privacy/multiseed/runs/privacy_fmnist/fashion_mnist-quantity3-K100/fedavg",
    ),
    Dataset(
        "har", "UCI-HAR", "uci_har-quantity2-K75", "flea_objective_har/runs/uci_har-quantity2-K75/fedavg"
    ),
)


@dataclass(frozen=True)
class Row:
    """One FLea setting against FedAvg and FedMix at its epsilon (None: nothing to compare yet)."""

    setting: str
    accuracy: Gain | None
    mse: Gain | None
    context: tuple[float, float] | None
    censored: tuple[bool, bool] = (False, False)
    """Whether a seed's context attack never reached 90% (its count is the largest size tried: a bound)."""

    @property
    def accurate(self) -> bool | None:
        return None if self.accuracy is None else beats(self.accuracy)

    @property
    def private(self) -> bool | None:
        if self.mse is None or self.context is None:
            return None
        recon = beats(self.mse)
        return None if recon is None else recon and self.context[0] >= self.context[1]

    @property
    def candidate(self) -> bool:
        return bool(self.accurate) and bool(self.private)


def _runs(path: Path) -> dict[int, Run]:
    return {run.seed: run for run in load_runs(path)} if path.is_dir() else {}


def _mse(reports: Reports, run: Run, fedmix: bool) -> float | None:
    """The MSE of the attacker's best reconstruction of ``run``'s shares at its latest attacked round."""
    key = run_key(run.path)
    mine = [r for r in reports.reconstruct if r.run == key]
    if fedmix:
        mine = [r for r in mine if r.shared == "averages" and r.attacker.startswith(FEDMIX_GUESS)]
    else:
        mine = [r for r in mine if r.shared == "features" and r.attacker in DECODERS]
    if not mine:
        return None
    latest = max(r.round for r in mine)
    return min(r.mse for r in mine if r.round == latest)


def _context(reports: Reports, run: Run) -> tuple[float, bool] | None:
    """Samples the context attack needed for 90% on ``run`` and whether it never got there (a bound)."""
    found = [r for r in reports.context if r.run == run_key(run.path)]
    return (found[-1].bound, found[-1].needed is None) if found else None


def _paired(values: Mapping[int, float | None], other: Mapping[int, float | None]) -> Gain | None:
    seeds = sorted(s for s in values if values[s] is not None and other.get(s) is not None)
    if not seeds:
        return None
    return Gain({s: float(values[s]) - float(other[s]) for s in seeds}, ())  # type: ignore[arg-type]


def rows(studies: Path, dataset: Dataset) -> list[Row]:
    """Every FLea setting of ``dataset`` with archived runs, in the study's order (layer, then epsilon)."""
    root = studies / "privacy_dp"
    runs = root / "runs"
    attacks = root / "attacks" / dataset.key
    reports = load_reports([attacks]) if attacks.is_dir() else Reports([], [])
    fedavg = {seed: LAST10(run) for seed, run in _runs(studies / dataset.fedavg).items()}
    found = []
    for layer in LAYERS:
        for eps in EPSILONS:
            flea = _runs(
                root / "runs" / f"privacy_dp_{dataset.key}_l{layer}_eps{eps}" / dataset.tail / "flea"
            )
            if not flea:
                continue
            fedmix = _runs(runs / f"privacy_dp_{dataset.key}_eps{eps}" / dataset.tail / "fedmix")
            accuracy = _paired({s: LAST10(r) for s, r in flea.items()}, fedavg)
            mse = _paired(
                {s: _mse(reports, r, False) for s, r in flea.items()},
                {s: _mse(reports, r, True) for s, r in fedmix.items()},
            )
            ours = [c for r in flea.values() if (c := _context(reports, r)) is not None]
            theirs = [c for r in fedmix.values() if (c := _context(reports, r)) is not None]
            context, censored = None, (False, False)
            if ours and theirs:
                context = (statistics.fmean(c for c, _ in ours), statistics.fmean(c for c, _ in theirs))
                censored = (any(b for _, b in ours), any(b for _, b in theirs))
            found.append(Row(f"FLea layer {layer}, epsilon {eps}", accuracy, mse, context, censored))
    return found


def _samples(row: Row) -> str:
    """``3000 vs >=10000``: the mean samples for 90% over seeds, ``>=`` where a seed never got there."""
    if row.context is None:
        return "-"
    ours, theirs = (
        "≥" * flag + f"{value:.0f}" for value, flag in zip(row.context, row.censored, strict=True)
    )
    return f"{ours} vs {theirs}"


def _claim(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "no"


def _gain(gain: Gain | None, digits: int) -> str:
    if gain is None:
        return "-"
    seeds = len(gain.values)
    return f"{fmt(gain.stat, digits, sign=True)} ({seeds} seed{'' if seeds == 1 else 's'})"


def recommended(found: Sequence[Row]) -> Row | None:
    """The most accurate candidate of ``found`` (one data set's rows), or None."""
    candidates = [r for r in found if r.candidate and r.accuracy is not None]
    return max(candidates, key=lambda r: r.accuracy.stat.mean if r.accuracy else 0.0, default=None)


def decided(found: Sequence[Row]) -> int:
    """How many of ``found`` have the seeds and attacks to decide both claims."""
    return sum(r.accurate is not None and r.private is not None for r in found)


def verdict(studies: Path) -> str:
    """The verdict's table per data set and the recommendation line."""
    parts = []
    best: Row | None = None
    settled = 0
    for dataset in DATASETS:
        found = rows(studies, dataset)
        if not found:
            parts.append(f"{dataset.title}: no archived run yet.")
            continue
        table = [
            [
                row.setting,
                _gain(row.accuracy, 2),
                _claim(row.accurate),
                _gain(row.mse, 4),
                _samples(row),
                _claim(row.private),
            ]
            for row in found
        ]
        header = [
            "setting",
            "last-10 gain over FedAvg (paired)",
            "more accurate",
            "MSE minus FedMix's (paired)",
            "context samples vs FedMix's",
            "more private than FedMix",
        ]
        parts.append(f"{dataset.title}:\n\n{markdown_table(header, table)}")
        if dataset.key == "fmnist":
            best, settled = recommended(found), decided(found)
    total = len(LAYERS) * len(EPSILONS)
    if best is not None:
        parts.append(
            f"**Recommended (`flea_private`): {best.setting}**, the most accurate Fashion-MNIST candidate."
        )
    elif settled == total:
        parts.append(
            f"**None**: none of the {total} Fashion-MNIST settings is both more accurate than FedAvg and "
            "more private than FedMix at its epsilon by the rules above."
        )
    else:
        parts.append(
            f"**Not decided yet**: {settled} of the {total} Fashion-MNIST settings have the seeds and "
            "attacks to decide, and none of them is a candidate."
        )
    return "\n\n".join(parts) + "\n"


@fragment("privacy_dp_verdict")
def privacy_dp_verdict(archive: Archive) -> str:
    """The verdict from the study's archived runs and attack outputs (:func:`verdict`)."""
    return verdict(archive.root)
