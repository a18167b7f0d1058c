"""``fedaug attack invert-frontier``: Fed-AugMix's severity against Inverting Gradients and accuracy.

The Fed-AugMix paper's Figs. 4-5 over seeds: per AugMix severity, the last-10 test accuracy of the trained
runs (``summary.json``'s ``last10_acc``; FedAvg is severity 0, a Fed-AugMix run's severity is its
``method.severity``) and the similarity of what Inverting Gradients recovers from a client's update at that
severity (``fedaug attack invert``'s ``results.jsonl``: SSIM, MSE or PSNR). Each attacked setting (stage,
threat model, loss scaling) is one line. Invert rows are averaged over a seed's batches first, then the mean
and the sample standard deviation (ddof = 1) are taken over seeds (unpaired with the runs: the attack runs
on the FedAvg model of its ``--checkpoint``, as in the paper). Severity 0 (no protection, the attacker
assumes plain cross-entropy) starts every line.

Three panels: accuracy against severity, the attack metric against severity, and accuracy against the metric
with each point labelled by its severity (the paper's Fig. 5: low SSIM and high accuracy, the upper left, is
the better trade-off).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fedaug.attacks.aggregate import fmt, stat
from fedaug.attacks.frontier import accuracy_limits, finished_runs
from fedaug.attacks.invert import STAGES, THREATS, choices
from fedaug.errors import ConfigError
from fedaug.registry import register
from fedaug.results.plots import new_figure, save_figure
from fedaug.results.store import Run, Stat
from fedaug.runtime import files as jsonio

METRICS = {
    "ssim": ("SSIM (%)", 100.0, "lower"),
    "mse": ("MSE", 1.0, "higher"),
    "psnr": ("PSNR (dB)", 1.0, "lower"),
}
"""Attack metric -> (axis label, scale, which values are more private)."""
MIN_SPAN = 10.0
"""The accuracy axes span at least this many points (close accuracies are not blown up into a trade-off)."""
UNPROTECTED = ("fedavg",)
"""Methods whose runs are severity 0 (no augmentation)."""
SETTING_KEYS = ("data", "model", "iterations", "batch_size", "local_epochs", "client_lr")
"""Invert options that must agree across the files of one frontier (else the seeds are not one setting)."""


@dataclass(frozen=True)
class Line:
    """One attacked setting: stage, threat model (``aware`` / ``ce``) and the client's loss scaling."""

    stage: str
    threat: str
    loss_scaling: bool

    @property
    def label(self) -> str:
        return f"{self.stage}, attacker {self.threat}{'' if self.loss_scaling else ', no LS'}"


def run_severity(run: Run) -> float:
    """A run's AugMix severity: 0 for FedAvg, else its method's ``severity`` option.

    Raises:
        ConfigError: a run of another method.
    """
    if run.method in UNPROTECTED:
        return 0.0
    value = run.config.get("method.severity")
    if not isinstance(value, (int, float)):
        raise ConfigError(
            f"run {run.path}: method {run.method} has no AugMix severity; give FedAvg (severity 0) or "
            "Fed-AugMix runs"
        )
    return float(value)


def read_runs(paths: Sequence[str]) -> dict[float, list[Run]]:
    """The finished runs in ``paths`` (run dirs or folders of them), by severity.

    Raises:
        ConfigError: a path that does not exist or holds no finished run; a run without a severity; two
            runs of one severity and seed.
    """
    by_severity: dict[float, list[Run]] = {}
    for text in paths:
        for run in finished_runs(Path(text), "runs"):
            group = by_severity.setdefault(run_severity(run), [])
            twin = next((r for r in group if r.seed == run.seed), None)
            if twin is not None:  # one seed counted twice would shrink the std
                raise ConfigError(
                    f"severity {run_severity(run):g}: two runs of seed {run.seed} ({twin.path}, {run.path}); "
                    "give one run per seed"
                )
            group.append(run)
    return by_severity


ROW_FIELDS: dict[str, type] = {
    "stage": str,
    "threat": str,
    "loss_scaling": bool,
    "severity": float,
    "seed": int,
    "ssim": float,
    "mse": float,
    "psnr": float,
}
"""What the frontier reads of an attack row, and its type (float: any int or float but NaN)."""


def row_problem(row: Any) -> str | None:
    """What is wrong with one line of a ``results.jsonl`` (None: a row the frontier can read; a floor row,
    ``{"floor": ...}``, is passed over whatever it holds)."""
    if not isinstance(row, dict):
        return f"{type(row).__name__} is not an attack row"
    if row.get("floor"):
        return None
    for key, kind in ROW_FIELDS.items():
        value = row.get(key)
        if kind is float:
            valid = isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
        else:
            valid = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
        if not valid:
            return f"{key} is {value!r}, not {'a number' if kind is float else 'a ' + kind.__name__}"
    for key in SETTING_KEYS:  # compared across files: a value, not a list or a mapping
        if isinstance(row.get(key), (list, dict)):
            return f"{key} is {row[key]!r}, not a value"
    return None


def read_invert(folders: Sequence[str]) -> list[dict[str, Any]]:
    """The attack rows of every ``results.jsonl`` in ``folders`` (each a ``fedaug attack invert --out``).

    Raises:
        ConfigError: a folder without ``results.jsonl``, a line that is not JSON or not an attack row
            (:func:`row_problem`), files of different settings.
    """
    rows: list[dict[str, Any]] = []
    for text in folders:
        path = Path(text) / "results.jsonl"
        if not path.is_file():
            raise ConfigError(f"--invert {text}: no results.jsonl (the --out folder of fedaug attack invert)")
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise ConfigError(
                    f"{path} line {number} is not JSON; remove it or rerun the attack"
                ) from None
            problem = row_problem(row)
            if problem:
                raise ConfigError(f"{path} line {number}: {problem}; remove it or rerun the attack")
            if not row.get("floor"):
                rows.append(row)
    settings = {tuple(row.get(k) for k in SETTING_KEYS) for row in rows}
    if len(settings) > 1:
        found = "; ".join(
            ", ".join(f"{k} {v}" for k, v in zip(SETTING_KEYS, s, strict=True)) for s in settings
        )
        raise ConfigError(f"--invert folders mix attack settings ({found}); give folders of one setting")
    return rows


def seed_means(rows: Iterable[dict[str, Any]], metric: str) -> dict[tuple[Line, float], list[float]]:
    """Per (line, severity): one value per seed, the mean over that seed's batches. Severity-0 rows (no
    protection) belong to every line of their stage."""
    rows = list(rows)
    lines = {Line(r["stage"], r["threat"], bool(r["loss_scaling"])) for r in rows if r["threat"] != "none"}
    per_seed: dict[tuple[Line, float, int], list[float]] = {}
    for r in rows:
        owners = (
            [line for line in lines if line.stage == r["stage"]]
            if r["threat"] == "none"
            else [Line(r["stage"], r["threat"], bool(r["loss_scaling"]))]
        )
        for line in owners:
            per_seed.setdefault((line, float(r["severity"]), int(r["seed"])), []).append(float(r[metric]))
    values: dict[tuple[Line, float], list[float]] = {}
    for (line, severity, _), batch in sorted(per_seed.items(), key=lambda kv: kv[0][2]):
        values.setdefault((line, severity), []).append(math.fsum(batch) / len(batch))
    return values


def severity_points(
    runs: dict[float, list[Run]], rows: Sequence[dict[str, Any]], metric: str
) -> tuple[dict[float, Stat], dict[Line, dict[float, Stat]]]:
    """Accuracy (%) per severity, and per line the metric per severity (mean and sample std over seeds)."""
    accuracy = {
        s: stat(100.0 * float(r.summary["last10_acc"]) for r in group) for s, group in sorted(runs.items())
    }
    attacked: dict[Line, dict[float, Stat]] = {}
    for (line, severity), values in seed_means(rows, metric).items():
        attacked.setdefault(line, {})[severity] = stat(values)
    order = sorted(attacked, key=lambda x: (x.stage != "untrained", x.threat, not x.loss_scaling))
    return accuracy, {line: dict(sorted(attacked[line].items())) for line in order}


def _bar(axes: Any, xs: list[float], ys: list[Stat], x_err: list[float] | None, **style: Any) -> None:
    y_err = [y.spread for y in ys]
    axes.errorbar(xs, [y.mean for y in ys], yerr=y_err, xerr=x_err, capsize=3, marker="o", **style)


PAPER_BOUNDS = {"ssim": (5.0, "Fed-AugMix paper: SSIM below 5% (Sec. V, Table II)")}
"""A metric's value the paper claims protected reconstructions stay on the private side of (a dotted line)."""


def plot(
    accuracy: dict[float, Stat], lines: dict[Line, dict[float, Stat]], metric: str, stem: Path
) -> list[Path]:
    """The three panels (module docstring)."""
    name, scale, private = METRICS[metric]
    figure = new_figure(15.0, 4.6)
    left, middle, right = (figure.add_subplot(1, 3, i) for i in (1, 2, 3))
    if accuracy:
        _bar(left, list(accuracy), list(accuracy.values()), None, color="black", label="runs")
    left.set(xlabel="AugMix severity (0 = FedAvg)", ylabel="last-10 test accuracy (%)", title="utility")
    labelled: set[tuple[float, float]] = set()
    for i, (line, points) in enumerate(lines.items()):
        style = {"color": f"C{i % 10}", "label": line.label}
        scaled = [Stat(v.mean * scale, v.std * scale, v.n) for v in points.values()]
        _bar(middle, list(points), scaled, None, **style)
        shared = [s for s in points if s in accuracy]
        if not shared:
            continue
        xs = [points[s].mean * scale for s in shared]
        x_err = [points[s].spread * scale for s in shared]
        _bar(right, xs, [accuracy[s] for s in shared], x_err, **style)
        ends = {shared[0], shared[-1]}  # each line is drawn in severity order: its two ends say which way
        for s, x in zip(shared, xs, strict=True):
            if s not in ends or (s, x) in labelled:  # severity 0 is one point shared by its stage's lines
                continue
            labelled.add((s, x))
            right.annotate(
                f"s={s:g}",
                (x, accuracy[s].mean),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize="x-small",
            )
    if metric in PAPER_BOUNDS:
        value, text = PAPER_BOUNDS[metric]
        middle.axhline(value, color="grey", linestyle=":", linewidth=1, label=text)
        right.axvline(value, color="grey", linestyle=":", linewidth=1, label=text)
    middle.set(xlabel="AugMix severity (0 = no protection)", ylabel=name, title="what the attack recovers")
    right.set(xlabel=f"{name} ({private} = more private)", ylabel="last-10 test accuracy (%)")
    right.set_title(f"trade-off (upper {'left' if private == 'lower' else 'right'} = better)")
    for axes in (left, right):
        low, high = axes.get_ylim()
        axes.set_ylim(*accuracy_limits(low, high, MIN_SPAN))
    for axes in (left, middle, right):
        axes.grid(alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize="x-small", loc="best")
    figure.suptitle(
        f"Fed-AugMix: severity vs Inverting Gradients {name} and accuracy; mean +- sample std over seeds",
        fontsize="medium",
    )
    return save_figure(figure, stem)


def markdown(accuracy: dict[float, Stat], lines: dict[Line, dict[float, Stat]], metric: str) -> str:
    """The table behind the figure: one row per severity."""
    name, scale, _ = METRICS[metric]
    severities = sorted(set(accuracy) | {s for points in lines.values() for s in points})
    head = "| severity | runs | last-10 acc. (%) | " + " | ".join(f"{name}: {x.label}" for x in lines) + " |"
    out = [
        "# Fed-AugMix: severity against Inverting Gradients and accuracy",
        "",
        f"Mean +- sample std (ddof = 1) over seeds; one value for one seed. {name}: each seed's mean over "
        "its attacked batches first. Accuracy and attack are not paired: the attack targets clients at each "
        "severity on the FedAvg model of its checkpoint.",
        "",
        head,
        "|" + "---|" * (3 + len(lines)),
    ]
    for s in severities:
        acc = accuracy.get(s)
        cells = [fmt(p[s], 2, scale) + f" (n={p[s].n})" if s in p else "-" for p in lines.values()]
        runs = str(acc.n) if acc else "0"
        out.append(f"| {s:g} | {runs} | {fmt(acc, 2) if acc else '-'} | " + " | ".join(cells) + " |")
    return "\n".join([*out, "", "![frontier](severity_frontier.png)"]) + "\n"


def run_invert_frontier(args: argparse.Namespace) -> dict[str, Any]:
    """Everything the command does; every input is read and checked before anything is written."""
    stages = choices(args.stages, STAGES, "--stages")
    threats = choices(args.threat_models, THREATS, "--threat-models")
    runs = read_runs(args.runs)
    rows = [
        r
        for r in read_invert(args.invert)
        if r.get("stage") in stages and (r.get("threat") == "none" or r.get("threat") in threats)
    ]
    if not any(r.get("threat") != "none" for r in rows):
        raise ConfigError(
            f"--invert {', '.join(args.invert)}: no attack on a protected client at stages {args.stages} and "
            f"threat models {args.threat_models}"
        )
    accuracy, lines = severity_points(runs, rows, args.metric)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    files = plot(accuracy, lines, args.metric, out / "severity_frontier")
    report = {
        "metric": args.metric,
        "statistic": "mean and sample std (ddof = 1) over seeds; invert rows averaged over batches per seed",
        "accuracy": {f"{s:g}": asdict(v) for s, v in accuracy.items()},
        "attack": {x.label: {f"{s:g}": asdict(v) for s, v in p.items()} for x, p in lines.items()},
        "runs": {f"{s:g}": [str(r.path) for r in group] for s, group in sorted(runs.items())},
        "invert": list(args.invert),
        "files": [p.name for p in files],
    }
    (out / "severity_frontier.json").write_text(jsonio.dumps(report, indent=2) + "\n")
    (out / "severity_frontier.md").write_text(markdown(accuracy, lines, args.metric))
    return report


@register(
    "attack", "invert-frontier", paper="reads invert outputs and Fed-AugMix runs; Fed-AugMix, Figs. 4-5"
)
class InvertFrontier:
    """``fedaug attack invert-frontier RUNS... --invert DIR... --out DIR`` (see the module docstring)."""

    help = "draw Fed-AugMix's severity against Inverting Gradients SSIM and accuracy, over seeds"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        add = parser.add_argument
        add("runs", nargs="+", metavar="RUNS", help="FedAvg and Fed-AugMix run dirs or folders of them")
        add("--invert", nargs="+", required=True, help="fedaug attack invert --out folders (one per seed)")
        add("--out", required=True, help="folder for severity_frontier.png/.json/.md")
        add("--metric", choices=tuple(METRICS), default="ssim", help="attack metric plotted (default ssim)")
        add("--stages", default="untrained,converged", help="attacked stages drawn (default both)")
        add("--threat-models", default="aware,ce", help="attacker threat models drawn (default both)")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        report = run_invert_frontier(args)
        for severity, value in report["accuracy"].items():
            print(f"severity {severity:<5} last-10 acc {value['mean']:.2f}% (n={value['n']})")
        print(f"report: {Path(args.out) / 'severity_frontier.md'}")
        return 0
