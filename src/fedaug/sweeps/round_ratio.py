"""How many FedAvg rounds one round of a method costs on a setting: what costs a run none of whose seeds has
been timed yet, from FedAvg's measured round time (``fedaug run``'s whole-job estimate).

* :func:`recorded_ratio`: from earlier runs of the same setting (the folders ``<out_dir>/<name>/<setting>``
  that hold timed seeds of both FedAvg and the method, the command's own setting dir first): the mean round
  time of the method's own rounds (after the FedAvg rounds it branches from, if any) over FedAvg's mean round
  time, both timed on this machine (by the rounds' CPU seconds where both logged them: a CPU run's, which
  other processes' load does not inflate as it does the wall clock);
* :data:`DEFAULT_ROUND_RATIO`: else fedaug's default for the method, the median of that ratio over the
  archived studies (:func:`archived_ratios` of ``studies/``; ``python -m tools.results`` rewrites the
  table with the generated documents, ``--check`` and a test compare it with the archive);
* :func:`round_ratio`: 1 for FedAvg, else the recorded ratio, else the default, else None (nothing to go on).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from fedaug.engine.checkpoint import logged_round_seconds

if TYPE_CHECKING:
    from fedaug.config.schema import ExperimentConfig

DEFAULT_ROUND_RATIO: dict[str, float] = {
    "centralized": 2.11,
    "fedadagrad": 1.4,
    "fedadam": 1.1,
    "fedaugmix": 3.08,
    "fedavgm": 1.14,
    "fedbr": 2.85,
    "feddata": 5.28,
    "feddecorr": 1.22,
    "feddyn": 2.29,
    "fedgen": 3.34,
    "fedlc": 1.12,
    "fedmix": 1.05,
    "fednova": 1.35,
    "fedntd": 1.27,
    "fedprox": 1.14,
    "fedprox_augmix": 3.17,
    "fedrs": 1.02,
    "fedyogi": 1.09,
    "fedzdac": 9.73,
    "fedzdas": 6.67,
    "flea": 2.49,
    "flea_eq6": 1.37,
    "local": 1.57,
    "qffl": 1.02,
    "scaffold": 1.49,
}
"""A method's round time over FedAvg's on the same setting and machine: the median over the settings of the
archived studies (``studies/*/runs`` and ``studies/*/*/runs``, UCI-HAR, FSDD, MNIST and FMNIST, CPU and GPU
runs), rounded to 2 decimals. A method absent here has no default: its runs are estimated once one of its
seeds is timed, or a ratio is recorded on the setting."""


def _seconds(method_dir: Path, rounds: range | None) -> list[tuple[float, float | None]]:
    """``(round_time, cpu_time)`` of every round (in ``rounds``, if given) that the seeds
    ``method_dir/seed*`` logged (``cpu_time`` None where a round has none)."""
    return [
        (wall, cpu)
        for run_dir in sorted(method_dir.glob("seed*"))
        for round_num, wall, cpu in logged_round_seconds(run_dir)
        if rounds is None or round_num in rounds
    ]


def _mean(seconds: list[tuple[float, float | None]], cpu: bool) -> float | None:
    """The mean wall time of ``seconds``, or with ``cpu`` their mean CPU seconds, None unless every round
    logged them (older runs and a GPU's lack them: the wall clock then compares like with like)."""
    times = [c for _, c in seconds] if cpu else [w for w, _ in seconds]
    if not times or any(t is None for t in times):
        return None
    return statistics.fmean(t for t in times if t is not None)


def mean_round_time(method_dir: Path, rounds: range | None = None) -> float | None:
    """Mean ``round_time`` (s) over the rounds (in ``rounds``, if given) that the seeds ``method_dir/seed*``
    logged in ``timings.jsonl`` (None: none)."""
    return _mean(_seconds(method_dir, rounds), cpu=False)


def setting_ratio(setting_dir: Path, method: str, own: range | None = None) -> float | None:
    """The method's mean round time (its ``own`` rounds) over FedAvg's in ``setting_dir`` (None: either is
    untimed there): by CPU seconds where both logged them on every round (CPU runs: what the load of other
    processes on the machine does not inflate, which the wall clock does, unevenly), else by wall time."""
    fedavg, mine = _seconds(setting_dir / "fedavg", None), _seconds(setting_dir / method, own)
    for cpu in (True, False):
        base, own_mean = _mean(fedavg, cpu), _mean(mine, cpu)
        if base is not None and own_mean is not None and base > 0:
            return own_mean / base
    return None


def same_settings(setting_dir: Path, out_dir: Path) -> list[Path]:
    """``setting_dir``, then the other folders of that setting under ``out_dir`` (one or two name segments
    deep: ``runs/default-smoke/uci_har-quantity2-K75``)."""
    others = [*out_dir.glob(f"*/{setting_dir.name}"), *out_dir.glob(f"*/*/{setting_dir.name}")]
    return [setting_dir, *sorted(d for d in others if d.is_dir() and d.resolve() != setting_dir.resolve())]


def recorded_ratio(setting_dir: Path, out_dir: Path, method: str, own: range | None = None) -> float | None:
    """The ratio of the first of :func:`same_settings` where both FedAvg and ``method`` are timed."""
    for folder in same_settings(setting_dir, out_dir):
        ratio = setting_ratio(folder, method, own)
        if ratio is not None:
            return ratio
    return None


def round_ratio(
    config: ExperimentConfig, setting_dir: Path, own: range | None = None
) -> tuple[float, str] | None:
    """``config``'s method's round time over FedAvg's and where it comes from (``recorded``, ``default``),
    or None when neither is known."""
    method = config.method.name
    if method == "fedavg":
        return 1.0, "recorded"
    recorded = recorded_ratio(setting_dir, Path(config.out_dir), method, own)
    if recorded is not None:
        return recorded, "recorded"
    if method in DEFAULT_ROUND_RATIO:
        return DEFAULT_ROUND_RATIO[method], "default"
    return None


def archived_ratios(studies: Path) -> dict[str, float]:
    """Per method, the median over the archived settings under ``studies`` of :func:`setting_ratio` (every
    round), rounded to 2 decimals: what :data:`DEFAULT_ROUND_RATIO` holds."""
    ratios: dict[str, list[float]] = defaultdict(list)
    settings: Iterable[Path] = sorted({*studies.glob("*/runs/*/fedavg"), *studies.glob("*/*/runs/*/fedavg")})
    for fedavg_dir in settings:
        for method_dir in sorted(p for p in fedavg_dir.parent.iterdir() if p.is_dir() and p.name != "fedavg"):
            ratio = setting_ratio(fedavg_dir.parent, method_dir.name)
            if ratio is not None:
                ratios[method_dir.name].append(ratio)
    return {method: round(statistics.median(values), 2) for method, values in sorted(ratios.items())}
