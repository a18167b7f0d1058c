"""``fedaug attack frontier``: the privacy-utility frontier, from run dirs and attack outputs.

One point per setting (for example FLea at each lambda2): the mean over its seeds of the last-10 test accuracy
(``summary.json``'s ``last10_acc``) against the mean reconstruction MSE of one decoder and against the number
of attacker samples the context attack needed for 90% detection, with error bars of one sample standard
deviation (ddof = 1) on both axes. Attack records are matched to runs by run dir (:func:`run_key`), at the
latest attacked round of each run unless ``--round`` says which. Reference lines: the accuracy of runs given
with ``--reference`` (FedAvg, horizontal) and the exposure of what FedMix / FedData share (their records in
the attack outputs, vertical), plus the MSE of the trivial attacker that outputs the mean input (image or
window). A setting whose runs are FedMix's (their records are of shared averages, no decoder) is plotted at
the attacker's estimate from its averages for random groups (the average itself without DP), one point per
setting whatever the decoder (the DP frontier's FedMix point per epsilon, studies/privacy_dp). Each record
is drawn once: the settings' own runs are points, never lines too, and with a FedMix setting among the
points no FedMix record is a line (:func:`exposures`).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fedaug.attacks.aggregate import (
    ContextRecord,
    ReconRecord,
    Reports,
    find_reports,
    fmt,
    load_reports,
    run_key,
    stat,
)
from fedaug.errors import ConfigError
from fedaug.registry import register
from fedaug.results.plots import new_figure, save_figure, setting_styles
from fedaug.results.store import Run, Stat, load_run, load_runs
from fedaug.runtime import files as jsonio

LINE_COLOURS = ("dimgrey", "saddlebrown", "black", "darkgrey", "olive")
"""Colours of the vertical reference lines (apart from the settings' C0-C9)."""
FEDMIX_GUESS = "average (random groups"
"""The reconstruction record a FedMix setting is plotted at: the attacker's guess of each member of a random
group from its average (the average itself, or under ``method.share_dp`` its best estimate from the noised
one; no decoder is trained on averages; one point per setting, whatever ``--decoder``)."""
MIN_SPAN = 10.0
"""The accuracy axis spans at least this many points."""


@dataclass
class Point:
    """One setting: its accuracy and attack results over seeds (None where no run was attacked)."""

    setting: str
    accuracy: Stat
    mse: Stat | None
    context: Stat | None
    context_censored: bool
    rounds: list[int]
    dcor: Stat | None = None
    exposure: Stat | None = None
    context_floor: bool = False


def parse_setting(spec: str, what: str) -> tuple[str, list[Run]]:
    """``LABEL=PATH[,PATH...]`` -> (label, the finished runs in those run dirs or folders of run dirs)."""
    label, sep, paths = spec.partition("=")
    if not sep or not label or not paths:
        raise ConfigError(f"{what} {spec!r} must be LABEL=RUN_DIR[,RUN_DIR...]")
    return label, [run for text in paths.split(",") for run in finished_runs(Path(text), f"{what} {label!r}")]


def finished_runs(path: Path, what: str) -> list[Run]:
    """The finished runs of a run dir or of a folder of run dirs.

    Raises:
        ConfigError: ``what: PATH does not exist`` / ``holds no finished run``.
    """
    if (path / "config.yaml").is_file():
        run = load_run(path)
        found = [run] if run is not None else []
    else:
        found = load_runs(path) if path.is_dir() else []
    if not found:
        state = "does not exist" if not path.exists() else "holds no finished run"
        raise ConfigError(f"{what}: {path} {state}")
    return found


def _at_round(records: Sequence[Any], round_num: int | None) -> list[Any]:
    """``records`` at ``round_num``, or at each run's latest attacked round."""
    if round_num is not None:
        return [r for r in records if r.round == round_num]
    latest: dict[tuple[str, ...], int] = {}
    for r in records:
        latest[r.run] = max(latest.get(r.run, -1), r.round if r.round is not None else -1)
    return [r for r in records if (r.round if r.round is not None else -1) == latest[r.run]]


def point(
    setting: str, runs: Sequence[Run], reports: Reports, *, decoder: str, round_num: int | None
) -> Point:
    """The setting's accuracy (%) and the attacks on its runs (one record per run)."""
    keys = {run_key(run.path) for run in runs}
    mine = [r for r in reports.reconstruct if r.run in keys]
    by_decoder = [r for r in mine if r.attacker == decoder]
    # FedMix's runs: no decoder, their averages are the guess (random groups: the member of a random group)
    averages = [r for r in mine if r.shared == "averages" and r.attacker.startswith(FEDMIX_GUESS)]
    recon: list[ReconRecord] = _at_round(by_decoder or averages, round_num)
    ctx: list[ContextRecord] = _at_round([r for r in reports.context if r.run in keys], round_num)
    attacked = {r.run: r.round for r in recon} | {c.run: c.round for c in ctx if c.round is not None}
    at = {
        run_key(run.path): round_num if round_num is not None else attacked.get(run_key(run.path))
        for run in runs
    }
    return Point(
        setting=setting,
        dcor=logged(runs, "flea/dcor", at),
        exposure=logged(runs, "flea/exposure", at),
        accuracy=stat(100.0 * float(run.summary["last10_acc"]) for run in runs),
        mse=stat(r.mse for r in recon) if recon else None,
        context=stat(r.bound for r in ctx) if ctx else None,
        context_censored=any(r.needed is None for r in ctx),
        context_floor=bool(ctx) and all(r.needed == min(r.accuracy) for r in ctx),
        rounds=sorted({r.round for r in recon} | {r.round for r in ctx if r.round is not None}),
    )


def logged(runs: Sequence[Run], key: str, at: dict[tuple[str, ...], int | None]) -> Stat | None:
    """``key`` as each run logged it in the round ``at`` gives for it (runs without it are left out)."""
    values = []
    for run in runs:
        round_num = at.get(run_key(run.path))
        record = next((m for m in run.metrics() if m.get("round") == round_num), {})
        if isinstance(record.get(key), (int, float)):
            values.append(float(record[key]))
    return stat(values) if values else None


def exposures(reports: Reports, plotted: Collection[tuple[str, ...]] = ()) -> dict[str, dict[str, Stat]]:
    """Reference lines from records of shared averages / raw inputs (per label and attacker) and the
    mean-image MSE of every reconstruction record.

    ``plotted`` holds the run keys of the settings' runs: those are points, and their records are not drawn
    again as lines; when one of them shared averages (a FedMix setting), no averages' record is a line (the
    FedMix points show FedMix; a line of another FedMix run would draw it twice).
    """
    records: list[ReconRecord | ContextRecord] = [*reports.reconstruct, *reports.context]
    fedmix_point = any(r.shared == "averages" and r.run in plotted for r in records)

    def line(r: ReconRecord | ContextRecord) -> bool:
        return (
            r.shared != "features" and r.run not in plotted and not (fedmix_point and r.shared == "averages")
        )

    mse: dict[str, list[float]] = {}
    for r in filter(line, reports.reconstruct):
        mse.setdefault(f"{r.label}: {r.attacker}", []).append(r.mse)
    context: dict[str, list[float]] = {}
    for c in filter(line, reports.context):
        context.setdefault(c.label, []).append(c.bound)
    baseline = [r.baseline_mse for r in reports.reconstruct]
    return {
        "mse": {k: stat(v) for k, v in mse.items()}
        | ({"mean input (nothing recovered)": stat(baseline)} if baseline else {}),
        "context": {k: stat(v) for k, v in context.items()},
    }


ZOOM_GAP = 10.0
"""A setting more than this many accuracy points below the best one is left out of the zoomed row."""


def _errorbar(axes: Any, x: Stat, y: Stat, label: str, colour: Any, marker: str) -> None:
    xerr = None if math.isnan(x.std) else x.std
    yerr = None if math.isnan(y.std) else y.std
    axes.errorbar(x.mean, y.mean, xerr=xerr, yerr=yerr, fmt=marker, capsize=3, color=colour, label=label)


def _close(points: Sequence[Point]) -> list[Point]:
    """The points within :data:`ZOOM_GAP` accuracy points of the best; all of them when none is farther."""
    best = max(p.accuracy.mean for p in points)
    return [p for p in points if p.accuracy.mean >= best - ZOOM_GAP]


def _limits(values: Sequence[Stat], pad: float, log: bool = False) -> tuple[float, float]:
    """Axis limits holding every value with its error bar, padded by ``pad`` of the span."""
    low = min(v.mean - v.spread for v in values)
    high = max(v.mean + v.spread for v in values)
    if log:
        low = max(low, min(v.mean for v in values) / 2)
        return low / (1 + pad), high * (1 + pad)
    span = high - low or abs(high) or 1.0
    return low - pad * span, high + pad * span


def plot(
    points: Sequence[Point],
    references: dict[str, Stat],
    lines: dict[str, dict[str, Stat]],
    stem: Path,
    *,
    decoder: str,
) -> list[Path]:
    """Two panels (accuracy vs MSE, accuracy vs context samples) with the reference lines; when a setting
    ends far below the others (e.g. one that collapsed), a second row zooms on the close ones."""
    close = _close(points)
    rows = 2 if points and len(close) < len(points) else 1
    figure = new_figure(11.0, 4.6 * rows)
    fields = (
        ("mse", f"reconstruction MSE ({decoder} decoder; higher = more private)"),
        ("context", "attacker samples for 90% marker detection (higher = more private)"),
    )
    style = setting_styles([p.setting for p in points])
    for row in range(rows):
        shown = points if row == 0 else close
        for column, (field, xlabel) in enumerate(fields):
            axes = figure.add_subplot(rows, 2, 2 * row + column + 1)
            _panel(axes, shown, references, lines[field], field, style, legend=row == 0)
            if row == 1:  # same colours and markers as above, so no second legend over the points
                _zoom(axes, shown, field)
                axes.set_title(f"zoom: the settings within {ZOOM_GAP:g} points of the best", fontsize="small")
            axes.set(xlabel=xlabel, ylabel="last-10 test accuracy (%)")
    figure.suptitle("privacy-utility frontier: mean +- sample std over seeds", fontsize="medium")
    return save_figure(figure, stem)


def _panel(
    axes: Any,
    points: Sequence[Point],
    references: dict[str, Stat],
    lines: dict[str, Stat],
    field: str,
    style: dict[str, tuple[str, str]],
    *,
    legend: bool,
) -> None:
    styles = [":", "-.", (0, (5, 2, 1, 2)), (0, (1, 3))]
    for p in points:
        value = getattr(p, field)
        if value is not None:
            # >=: some seed never reached 90%; <=: every seed reached it at the smallest size tried
            bound = ""
            if field == "context":
                bound = ">=" if p.context_censored else "<=" if p.context_floor else ""
            label = f"{p.setting} ({bound})" if bound else p.setting
            _errorbar(axes, value, p.accuracy, label, *style[p.setting])
    for i, (name, value) in enumerate(lines.items()):
        shade = LINE_COLOURS[i % len(LINE_COLOURS)]
        axes.axvline(value.mean, color=shade, linestyle=styles[i % len(styles)], linewidth=1, label=name)
    for j, (name, value) in enumerate(references.items()):
        axes.axhline(
            value.mean, color=f"C{(j + 5) % 10}", linestyle="--", linewidth=1, label=f"{name} accuracy"
        )
    low, high = axes.get_ylim()
    axes.set_ylim(*accuracy_limits(low, high, MIN_SPAN))
    if field == "context":
        axes.set_xscale("log")
    axes.grid(alpha=0.3)
    if legend and axes.get_legend_handles_labels()[0]:  # a panel without any attack output stays empty
        axes.legend(fontsize="x-small", loc="best")


def accuracy_limits(low: float, high: float, span: float) -> tuple[float, float]:
    """Limits of an accuracy (%) axis showing ``low..high``: widened about its middle to at least ``span``
    points (close points are not blown up into a trade-off), then moved down, if the widening alone took it
    above 100%, so that it ends at 100 (or at ``high``, where the data itself reaches further)."""
    if high - low >= span:
        return low, high
    mid = (low + high) / 2
    wide_low, wide_high = mid - span / 2, mid + span / 2
    top = max(100.0, high)
    if wide_high > top:
        wide_low, wide_high = wide_low - (wide_high - top), top
    return wide_low, wide_high


def _zoom(axes: Any, points: Sequence[Point], field: str) -> None:
    """Limits of a zoomed panel: its points with their error bars (reference lines outside stay unseen)."""
    values = [(getattr(p, field), p.accuracy) for p in points if getattr(p, field) is not None]
    if not values:
        return
    axes.set_xlim(*_limits([x for x, _ in values], 0.15, log=field == "context"))
    low, high = _limits([y for _, y in values], 0.15)
    axes.set_ylim(*accuracy_limits(low, high, MIN_SPAN / 2))


def markdown(report: dict[str, Any], points: Sequence[Point]) -> str:
    """The table behind the figure."""
    lines = [
        "# Privacy-utility frontier",
        "",
        f"Decoder: {report['decoder']}; round: {report['round'] or 'the latest attacked round of each run'}. "
        "Mean +- sample std (ddof = 1) over seeds (unpaired); one value for one seed. Context: a seed that "
        "never reached 90% counts as the largest size tried (>=: a lower bound); <=: every seed reached 90% "
        "at the smallest size tried (an upper bound). Logged dCor and exposure: "
        "the runs' own `flea/dcor` and `flea/exposure` in the attacked round.",
        "",
        "| setting | runs | last-10 acc. (%) | attacked | rounds | reconstruction MSE | samples for 90% "
        "| logged dCor | exposure |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        attacked = max(p.mse.n if p.mse else 0, p.context.n if p.context else 0)
        bound = ">= " if p.context_censored else "<= " if p.context_floor else ""
        ctx = "-" if p.context is None else bound + fmt(p.context, 0)
        lines.append(
            f"| {p.setting} | {p.accuracy.n} | {fmt(p.accuracy, 2)} | {attacked} "
            f"| {', '.join(map(str, p.rounds)) or '-'} | {fmt(p.mse) if p.mse else '-'} | {ctx} "
            f"| {fmt(p.dcor, 3) if p.dcor else '-'} | {fmt(p.exposure, 3) if p.exposure else '-'} |"
        )
    for kind, values in report["lines"].items():
        for name, value in values.items():
            lines.append(f"\nReference ({kind}): {name}: {value['mean']:.4g} (n = {value['n']})")
    for name, value in report["references"].items():
        lines.append(f"\nReference accuracy: {name}: {value['mean']:.2f}% (n = {value['n']})")
    lines += ["", "![frontier](frontier.png)"]
    return "\n".join(lines) + "\n"


def run_frontier(args: argparse.Namespace) -> dict[str, Any]:
    """Everything ``fedaug attack frontier`` does (inputs checked before anything is written)."""
    settings = [parse_setting(spec, "setting") for spec in args.settings]
    references = dict(parse_setting(spec, "--reference") for spec in args.reference)
    sources = find_reports(args.attacks)
    reports = load_reports(sources)
    decoders = sorted({r.attacker for r in reports.reconstruct if r.shared == "features"})
    if decoders and args.decoder not in decoders:
        raise ConfigError(f"--decoder {args.decoder!r}: the attack outputs hold {', '.join(decoders)}")
    points = [
        point(label, runs, reports, decoder=args.decoder, round_num=args.round) for label, runs in settings
    ]
    if all(p.mse is None and p.context is None for p in points):
        at = f" at round {args.round}" if args.round is not None else ""
        raise ConfigError(
            f"no attack output under {', '.join(args.attacks)} is about these runs{at} "
            f"(run dirs are matched by their last four parts: name/data-partition/method/seed)"
        )
    ref_stats = {
        name: stat(100.0 * float(r.summary["last10_acc"]) for r in runs) for name, runs in references.items()
    }
    lines = exposures(reports, {run_key(run.path) for _, runs in settings for run in runs})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    files = plot(points, ref_stats, lines, out / "frontier", decoder=args.decoder)
    report = {
        "decoder": args.decoder,
        "round": args.round,
        "statistic": "mean and sample std (ddof = 1) over seeds",
        "points": [asdict(p) for p in points],
        "references": {k: asdict(v) for k, v in ref_stats.items()},
        "lines": {kind: {k: asdict(v) for k, v in values.items()} for kind, values in lines.items()},
        "attack_reports": [str(p) for p in sources],
        "files": [p.name for p in files],
    }
    (out / "frontier.json").write_text(jsonio.dumps(report, indent=2, default=str) + "\n")
    (out / "frontier.md").write_text(markdown(report, points))
    return report


@register("attack", "frontier", paper="reads reconstruct / context outputs; Xia et al., KDD 2024, Sec. 4.4")
class Frontier:
    """``fedaug attack frontier SETTING=RUNS ... --attacks DIR ...`` (see the module docstring)."""

    help = "draw the privacy-utility frontier (accuracy vs reconstruction MSE / context samples) over seeds"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "settings",
            nargs="+",
            metavar="LABEL=RUN_DIR[,RUN_DIR...]",
            help="one point each: run dirs, or folders of run dirs (one per seed)",
        )
        parser.add_argument(
            "--attacks",
            nargs="+",
            required=True,
            help="attack output folders (reconstruct.json / context.json)",
        )
        parser.add_argument("--out", required=True, help="folder for frontier.png/.json/.md")
        parser.add_argument(
            "--decoder", default="deep", help="the reconstruction attacker plotted (default: deep)"
        )
        parser.add_argument("--round", type=int, help="attacked round to plot (default: each run's latest)")
        parser.add_argument(
            "--reference", action="append", default=[], metavar="LABEL=RUN_DIR[,...]", help="accuracy line"
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        report = run_frontier(args)
        for p in report["points"]:
            mse = p["mse"]["mean"] if p["mse"] else float("nan")
            print(f"{p['setting']:<28} last-10 acc {p['accuracy']['mean']:.2f}%  MSE {mse:.4f}")
        print(f"report: {Path(args.out) / 'frontier.md'}")
        return 0
