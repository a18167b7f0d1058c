"""Attack outputs of several seeds, read back and aggregated (``fedaug attack summary`` and ``frontier``).

``fedaug attack reconstruct`` and ``context`` write ``reconstruct.json`` / ``context.json``; a multi-seed
study runs them once per seed with the same target labels (``"flea r30=runs/.../seed1@30"``). Records of the
same label (and decoder) are one setting over seeds: the mean and the sample standard deviation (ddof = 1)
over the files they come from (:func:`fedaug.results.store.aggregate`). A record remembers its run dir so
that :mod:`fedaug.attacks.frontier` can pair it with the run's accuracy; run dirs are compared by their last
four parts (name / data-partition / method / seed), which ``fedaug archive`` keeps.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fedaug.attacks.rounds_plot import Series
from fedaug.errors import ConfigError
from fedaug.registry import register
from fedaug.results.store import Stat, aggregate
from fedaug.runtime import files as jsonio

logger = logging.getLogger(__name__)

REPORTS = ("reconstruct.json", "context.json")


def run_key(path: str | Path) -> tuple[str, ...]:
    """The last four parts of a run dir: the same for ``runs/x/...`` and its archived copy."""
    return Path(path).parts[-4:]


@dataclass(frozen=True)
class ReconRecord:
    """One (target, attacker) row of a ``reconstruct.json``."""

    label: str
    run: tuple[str, ...]
    round: int
    shared: str
    attacker: str
    mse: float
    baseline_mse: float
    eval_dcor: float | None


@dataclass(frozen=True)
class ContextRecord:
    """One target of a ``context.json``: the mean accuracy per training size over its repeats."""

    label: str
    run: tuple[str, ...]
    round: int | None
    shared: str
    accuracy: dict[int, float]
    needed: int | None

    @property
    def bound(self) -> float:
        """Samples for 90%, or the largest size tried when it was not reached (a lower bound)."""
        return float(self.needed if self.needed is not None else max(self.accuracy))


@dataclass
class Reports:
    """Everything read from attack outputs."""

    reconstruct: list[ReconRecord]
    context: list[ContextRecord]


def _round_of(target: dict[str, Any]) -> int | None:
    if isinstance(target.get("round"), int):
        return int(target["round"])
    found = re.search(r" round (\d+)", str(target.get("description", "")))  # reports written before "round"
    return int(found.group(1)) if found else None


def _shared_of(target: dict[str, Any]) -> str:
    if isinstance(target.get("shared"), str):
        return str(target["shared"])
    text = str(target.get("description", ""))  # reports written before "shared"
    return "raw" if "raw inputs" in text else "averages" if "averages of" in text else "features"


def _read(path: Path) -> dict[str, Any]:
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is not a readable attack report ({exc})") from exc
    if not isinstance(report, dict) or "targets" not in report:
        raise ConfigError(f"{path} is not an attack report (no 'targets')")
    return report


def _number(value: Any) -> float:
    """A finite number of a report (not a bool, a string or NaN: what the attacks write)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number")
    return float(value)


def _count(value: Any) -> int:
    """A round or a sample count of a report."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is not an integer")
    return value


def _mean(accuracies: Any, label: str, size: Any) -> float:
    """The mean of a context curve's accuracies at one training size (one per repeat)."""
    if not isinstance(accuracies, list) or not accuracies:
        raise ValueError(f"target {label!r} has no accuracies at size {size}")
    return sum(_number(a) for a in accuracies) / len(accuracies)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value


def _entry(mapping: Any, label: str, where: str) -> Any:
    """``mapping[label]``; a target missing from it is named."""
    if label not in mapping:
        raise ValueError(f"target {label!r} has no entry in {where!r}")
    return mapping[label]


def _reconstruct(report: dict[str, Any]) -> list[ReconRecord]:
    targets = {_text(t["label"]): t for t in report["targets"]}
    records = []
    for row in report["rows"]:
        target = _entry(targets, _text(row["target"]), "targets")
        dcor = target.get("eval_dcor")
        records.append(
            ReconRecord(
                label=row["target"],
                run=run_key(_text(target["run_dir"])),
                round=_count(row["round"]),
                shared=_text(row["shared"]),
                attacker=_text(row["attacker"]),
                mse=_number(row["mse"]),
                baseline_mse=_number(row["baseline_mse"]),
                eval_dcor=None if dcor is None else _number(dcor),
            )
        )
    return records


def _context(report: dict[str, Any]) -> list[ContextRecord]:
    records = []
    for target in report["targets"]:
        label = _text(target["label"])
        curve = _entry(report["accuracy"], label, "accuracy")
        needed = _entry(report["needed_for_90"], label, "needed_for_90")
        records.append(
            ContextRecord(
                label=label,
                run=run_key(_text(target["run_dir"])),
                round=_round_of(target),
                shared=_shared_of(target),
                accuracy={int(size): _mean(accs, label, size) for size, accs in curve.items()},
                needed=None if needed is None else _count(needed),
            )
        )
    return records


MALFORMED = (KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError)
"""What reading a report whose JSON has the wrong shape raises (a key missing, a value of the wrong type)."""


def _malformed(path: Path, exc: Exception) -> ConfigError:
    first = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
    reason = f"no {exc.args[0]!r}" if isinstance(exc, KeyError) and exc.args else first
    return ConfigError(f"{path} is a malformed attack report ({reason}); rerun the attack that wrote it")


def find_reports(paths: Sequence[str | Path]) -> list[Path]:
    """The attack reports in ``paths`` (files, or folders searched recursively), sorted; raises ConfigError
    naming a path that holds none."""
    found: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_file() and path.name in REPORTS:
            found.append(path)
            continue
        inside = sorted(p for name in REPORTS for p in path.rglob(name)) if path.is_dir() else []
        if not inside:
            what = "does not exist" if not path.exists() else "holds no " + " or ".join(REPORTS)
            raise ConfigError(f"attack output {path} {what}")
        found += inside
    return sorted(dict.fromkeys(found))


def load_reports(paths: Sequence[str | Path]) -> Reports:
    """Every record of the reports under ``paths`` (see :func:`find_reports`)."""
    reports = Reports([], [])
    for path in find_reports(paths):
        report = _read(path)
        try:
            if path.name == "reconstruct.json":
                reports.reconstruct += _reconstruct(report)
            else:
                reports.context += _context(report)
        except MALFORMED as exc:
            raise _malformed(path, exc) from exc
    return reports


def stat(values: Iterable[float]) -> Stat:
    """Mean, sample std (ddof = 1; NaN for one value) and count."""
    return aggregate(list(values))


def fmt(value: Stat, digits: int = 4, scale: float = 1.0) -> str:
    """``mean +- std`` (just the mean for one value)."""
    if math.isnan(value.std):
        return f"{value.mean * scale:.{digits}f}"
    return f"{value.mean * scale:.{digits}f} +- {value.std * scale:.{digits}f}"


def _grouped(items: Iterable[Any], key: Any) -> dict[Any, list[Any]]:
    groups: dict[Any, list[Any]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def reconstruct_table(records: Sequence[ReconRecord]) -> list[str]:
    """Markdown: one row per (label, attacker) with the MSE over its files (seeds)."""
    lines = [
        "| target | round | attacker | seeds | eval MSE | mean-image MSE | MSE / mean-image | dCor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (label, attacker), rows in _grouped(records, lambda r: (r.label, r.attacker)).items():
        dcors = [r.eval_dcor for r in rows if r.eval_dcor is not None]
        ratio = stat(r.mse / r.baseline_mse for r in rows if r.baseline_mse > 0)
        lines.append(
            f"| {label} | {rows[0].round} | {attacker} | {len(rows)} | {fmt(stat(r.mse for r in rows))} "
            f"| {fmt(stat(r.baseline_mse for r in rows))} | {fmt(ratio, 3)} "
            f"| {fmt(stat(dcors), 3) if dcors else '-'} |"
        )
    return lines


def context_table(records: Sequence[ContextRecord]) -> list[str]:
    """Markdown: one row per label, accuracy (%) per training size and samples for 90% over its files."""
    sizes = sorted({s for r in records for s in r.accuracy})
    lines = [
        "| target | seeds | " + " | ".join(str(s) for s in sizes) + " | samples for 90% (per seed) |",
        "|---|---|" + "---|" * (len(sizes) + 1),
    ]
    for label, rows in _grouped(records, lambda r: r.label).items():
        cells = [
            fmt(stat(r.accuracy[s] for r in rows if s in r.accuracy), 1, 100.0)
            if any(s in r.accuracy for r in rows)
            else "-"
            for s in sizes
        ]
        each = ", ".join(str(r.needed) if r.needed is not None else f"> {max(r.accuracy)}" for r in rows)
        reach = fmt(stat(r.bound for r in rows), 0)
        censored = any(r.needed is None for r in rows)
        lines.append(
            f"| {label} | {len(rows)} | "
            + " | ".join(cells)
            + f" | {'>= ' if censored else ''}{reach} ({each}) |"
        )
    return lines


def setting_of(label: str, round_: int) -> str:
    """``label`` without its trailing `` r<round>`` (the study scripts' labels: ``flea lambda2 0 r10`` ->
    ``flea lambda2 0``); the label itself when it has none."""
    return re.sub(rf"\s+r{round_}$", "", label)


def round_series(reports: Reports) -> tuple[Series, Series]:
    """By round, for ``fedaug attack summary``'s figure: reconstruction MSE / mean-input MSE per (setting,
    decoder), and samples for 90% context detection per (setting, ``""``; a seed that never reached 90%
    counts as the largest size tried); mean and sample std over the reports. Targets without a round are left
    out."""
    recon: dict[tuple[str, str], dict[int, list[float]]] = {}
    for r in reports.reconstruct:
        if r.round is not None and r.baseline_mse > 0:
            key = (setting_of(r.label, r.round), r.attacker)
            recon.setdefault(key, {}).setdefault(r.round, []).append(r.mse / r.baseline_mse)
    context: dict[tuple[str, str], dict[int, list[float]]] = {}
    for c in reports.context:
        if c.round is not None:
            context.setdefault((setting_of(c.label, c.round), ""), {}).setdefault(c.round, []).append(c.bound)

    def stats(values: dict[tuple[str, str], dict[int, list[float]]]) -> Series:
        return {key: {k: stat(v) for k, v in sorted(points.items())} for key, points in values.items()}

    return stats(recon), stats(context)


def _rounds_figure(reports: Reports, stem: Path) -> list[Path]:
    """:func:`~fedaug.attacks.rounds_plot.plot_rounds` where matplotlib is installed (a hint where not)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        logger.info("pip install 'fedaug[plots]' to get the attacks by round as a figure")
        return []
    from fedaug.attacks.rounds_plot import plot_rounds

    return plot_rounds(*round_series(reports), stem)


def summary_markdown(reports: Reports, sources: Sequence[Path], figures: Sequence[Path] = ()) -> str:
    """The ``fedaug attack summary`` page: the figure by round (when drawn), both tables, the statistic and
    the files they come from."""
    lines = [
        "# Attack results over seeds",
        "",
        "Each row aggregates the reports that hold its target label (one per seed): mean +- sample standard "
        "deviation (ddof = 1) over them; one value when there is one report. Context accuracy in %, the "
        "mean over each report's repeats first; a seed that never reached 90% counts as the largest size "
        "tried (the mean is then a lower bound, marked >=).",
        "",
    ]
    lines += (
        [*(f"![attacks by round]({p.name})" for p in figures if p.suffix == ".png"), ""] if figures else []
    )
    if reports.reconstruct:
        lines += [
            "## Reconstruction (held-out MSE, natural scale)",
            "",
            *reconstruct_table(reports.reconstruct),
            "",
        ]
    if reports.context:
        lines += ["## Context identification", "", *context_table(reports.context), ""]
    lines += ["Reports:", "", *(f"* `{p}`" for p in sources)]
    return "\n".join(lines) + "\n"


@register("attack", "summary", paper="reads reconstruct / context outputs of several seeds")
class Summary:
    """``fedaug attack summary DIR ... --out DIR``: the multi-seed tables of attack outputs."""

    help = "aggregate reconstruct / context outputs of several seeds (mean +- sample std per target label)"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "attacks", nargs="+", help="attack output folders or report files (searched recursively)"
        )
        parser.add_argument("--out", required=True, help="folder for summary.md / summary.json")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        sources = find_reports(args.attacks)
        reports = load_reports(sources)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        figures = _rounds_figure(reports, out / "summary_rounds")
        (out / "summary.md").write_text(summary_markdown(reports, sources, figures))
        data = {
            "reconstruct": [asdict(r) for r in reports.reconstruct],
            "context": [asdict(r) for r in reports.context],
        }
        (out / "summary.json").write_text(jsonio.dumps(data, indent=2) + "\n")
        print(
            f"{len(sources)} reports: {len(reports.reconstruct)} reconstruction and {len(reports.context)} "
            f"context records; report: {out / 'summary.md'}"
        )
        return 0
