"""What a GPU session's ``scripts/gpu_session.sh`` measured, against issue #32's targets -> Markdown, JSON.

Reads the folders its commands' files came back to (``machine.txt``, ``tests_graphs.txt``, ``probe.json``,
``grid.log``, ``grid_runs.tgz``): one folder for the whole script, or one per command when the session split
it (``GRID=0`` for the tests and the probe, then ``scripts/gpu_grid.sh``, perhaps again to resume the grid).
The first folder holding a file gives it, except the grid: its runs come from the last ``grid_runs.tgz`` (the
archive of the grid so far) and its sweep time is summed over every ``grid.log``. It prints:

* the card and the decisions the script took (graphs, MPS);
* the graph tests' last line;
* the probe: median seconds per round of FedAvg and FLea without and with ``engine.cuda_graphs`` (and batched
  clients), a 100-round run's time from it, the best accuracy of its few rounds (the modes should agree to
  float rounding) and the recordings (shapes recorded, replays, host seconds spent recording);
* the grid: rounds done of the 36 runs' 3,600, the sweep's wall time, each finished run's time, and the
  whole grid's time projected from the rounds done (the rate so far; a grid cut short has its long runs'
  ends still to come, so the projection is a lower bound);
* the targets: FedAvg <= 15 s a run, FLea <= 60 s a run (a run alone, from the probe, and amortised over the
  packed grid: the sweep's wall time shared out by run time, per 100 rounds of the K = 75 runs), the 36-run
  grid <= 600 s;
* with ``--reference``, each setting's and method's best and last-10 accuracy against an earlier archive of
  the same grid (paired by seed): a change that broke training on the GPU shows as points lost.

Usage::

    python benchmarks/gpu_session_summary.py /path/to/files_at [MORE_FOLDERS ...] [--json summary.json] \\
        [--reference studies/flea_table1_har/h100/runs]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TARGET_RUN_S = {"fedavg": 15.0, "flea": 60.0}
TARGET_GRID_S = 600.0
GRID_ROUNDS = 36 * 100


@dataclass
class GridRun:
    """One run of the grid, from its archived ``timings.jsonl[.gz]`` and ``metrics.jsonl[.gz]``."""

    setting: str  # e.g. uci_har-quantity2-K75
    method: str
    seed: str
    rounds: int
    seconds: float  # sum of its rounds' wall time
    best_acc: float | None
    last10_acc: float | None = None  # the mean of its last 10 rounds' test accuracy, once it has 10


def _rows(data: bytes, gzipped: bool) -> list[dict[str, Any]]:
    """The JSON lines of a file's bytes (gzipped: as ``fedaug archive`` writes them)."""
    text = gzip.decompress(data) if gzipped else data
    return [json.loads(line) for line in text.decode().splitlines() if line.strip()]


def _accs(rows: list[dict[str, Any]]) -> list[float]:
    return [r["test/acc"] for r in rows if "test/acc" in r]


def read_grid(tgz: Path) -> list[GridRun]:
    """The runs in ``grid_runs.tgz`` (``archive/<setting>/<method>/<seed>/``)."""
    timings: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    metrics: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    with tarfile.open(tgz) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            name = parts[-1].removesuffix(".gz")  # fedaug archive gzips the lines; older tarballs did not
            if len(parts) != 5 or name not in ("timings.jsonl", "metrics.jsonl") or not member.isfile():
                continue
            handle = tar.extractfile(member)
            assert handle is not None
            rows = _rows(handle.read(), parts[-1].endswith(".gz"))
            target = timings if name == "timings.jsonl" else metrics
            target[(parts[1], parts[2], parts[3])] = rows
    runs = []
    for key, rows in sorted(timings.items()):
        accs = _accs(metrics.get(key, []))
        runs.append(
            GridRun(
                *key,
                rounds=len(rows),
                seconds=sum(r.get("round_time", 0.0) for r in rows),
                best_acc=max(accs) if accs else None,
                last10_acc=statistics.fmean(accs[-10:]) if len(accs) >= 10 else None,
            )
        )
    return runs


def read_reference(folder: Path) -> dict[tuple[str, str, str], list[float]]:
    """Test accuracy per round of each run archived under ``folder`` (``<setting>/<method>/<seed>/``, e.g.
    ``studies/flea_table1_har/h100/runs``), by (setting, method, seed)."""
    found = {}
    for path in sorted(folder.glob("*/*/*/metrics.jsonl*")):
        if path.name in ("metrics.jsonl", "metrics.jsonl.gz"):
            setting, method, seed = path.parent.relative_to(folder).parts
            found[(setting, method, seed)] = _accs(_rows(path.read_bytes(), path.suffix == ".gz"))
    return found


def against_reference(
    runs: list[GridRun], reference: dict[tuple[str, str, str], list[float]], rounds: int = 100
) -> list[dict[str, Any]]:
    """Per setting and method, this grid's finished runs minus the reference's of the same seeds, points of
    best and last-10 accuracy (paired by seed): the same code on the same card should differ by float
    rounding's drift only, a few points per run and near 0 on average."""
    pairs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for run in runs:
        ref = reference.get((run.setting, run.method, run.seed), [])
        if run.rounds >= rounds and len(ref) >= rounds and run.best_acc is not None and run.last10_acc:
            best = 100 * (run.best_acc - max(ref))
            last10 = 100 * (run.last10_acc - statistics.fmean(ref[-10:]))
            pairs.setdefault((run.setting, run.method), []).append((best, last10))
    return [
        {
            "setting": setting,
            "method": method,
            "seeds": len(diffs),
            "best_points": round(statistics.fmean(d[0] for d in diffs), 2),
            "last10_points": round(statistics.fmean(d[1] for d in diffs), 2),
        }
        for (setting, method), diffs in sorted(pairs.items())
    ]


def sweep_seconds(grid_log: Path) -> float | None:
    """The sweep's wall time from ``grid.log``'s ``sweep exit N after S s`` line."""
    if not grid_log.exists():
        return None
    found = re.findall(r"sweep exit \d+ after (\d+) s", grid_log.read_text())
    return float(found[-1]) if found else None


def sweep_memory_mib(grid_log: Path) -> float | None:
    """The GPU's most used memory during the sweep, MiB (``scripts/gpu_grid.sh`` samples it every 2 s)."""
    if not grid_log.exists():
        return None
    found = re.findall(r"GPU memory used during the sweep, max MiB: (\d+)", grid_log.read_text())
    return float(found[-1]) if found else None


def probe_rows(probe: Path) -> list[dict[str, Any]]:
    """One row per method and mode of ``probe.json``."""
    if not probe.exists():
        return []
    report = json.loads(probe.read_text())
    rows = []
    for method, modes in report.get("methods", {}).items():
        for row in modes:
            graphs = row.get("step_graphs", {})
            rows.append(
                {
                    "method": method,
                    "mode": row["mode"],
                    "median_round_s": row.get("median_round_s"),
                    "run_s": round(row["median_round_s"] * 100, 1) if row.get("median_round_s") else None,
                    "best_acc": row.get("best_acc"),
                    "captured": graphs.get("captured"),
                    "replayed": graphs.get("replayed"),
                    "eager": graphs.get("eager"),
                    "record_s": graphs.get("record_s"),
                }
            )
    return rows


def _first(folders: list[Path], name: str) -> Path | None:
    """The first of ``folders`` that holds ``name``."""
    return next((f / name for f in folders if (f / name).exists()), None)


def summarise(*folders: Path, reference: Path | None = None) -> dict[str, Any]:
    """Everything :func:`render` prints, as a dict, from a session's folders (in its commands' order); with
    ``reference``, a folder of archived runs of the same grid, the accuracy against it."""
    found = list(folders)
    machine_file, tests_file = _first(found, "machine.txt"), _first(found, "tests_graphs.txt")
    probe_file = _first(found, "probe.json")
    archives = [f / "grid_runs.tgz" for f in found if (f / "grid_runs.tgz").exists()]
    machine = machine_file.read_text() if machine_file else ""
    tests = tests_file.read_text().strip().splitlines() if tests_file else []
    probe = probe_rows(probe_file) if probe_file else []
    runs = read_grid(archives[-1]) if archives else []
    walls = [w for f in found if (w := sweep_seconds(f / "grid.log")) is not None]
    wall = sum(walls) if walls else None
    done = sum(r.rounds for r in runs)
    summary: dict[str, Any] = {
        "machine": [line for line in machine.splitlines() if line.strip()],
        "tests": [line for line in tests if re.search(r"passed|failed|error|exit", line)][-2:],
        "probe": probe,
        "grid": {
            "runs": [r.__dict__ for r in runs],
            "finished": sum(r.rounds >= 100 for r in runs),
            "rounds_done": done,
            "sweep_s": wall,
            "sweep_commands": len(walls),
            "max_gpu_memory_mib": max(
                (m for f in found if (m := sweep_memory_mib(f / "grid.log")) is not None), default=None
            ),
            "projected_s": round(wall * GRID_ROUNDS / done, 1) if wall and done else None,
        },
    }
    targets = {}
    for method, limit in TARGET_RUN_S.items():
        # the modes a run can be given (graphs_unreleased is a diagnostic: the engine without its release)
        alone = [
            r["run_s"]
            for r in probe
            if r["method"] == method and r["run_s"] is not None and r["mode"] != "graphs_unreleased"
        ]
        # the sweep's wall time shared out by run time, per 100 rounds of the default preset's K = 75 runs
        mine = [r for r in runs if r.method == method and r.setting.endswith("-K75")]
        rounds = sum(r.rounds for r in mine)
        share = sum(r.seconds for r in mine) / max(sum(r.seconds for r in runs), 1e-9)
        packed = wall * share / (rounds / 100) if wall and rounds else None
        targets[method] = {
            "limit_s": limit,
            "alone_best_s": min(alone) if alone else None,
            "packed_amortised_s": round(packed, 1) if packed else None,
        }
    grid = summary["grid"]
    targets["grid"] = {
        "limit_s": TARGET_GRID_S,
        "projected_s": grid["projected_s"],
        # the target: all 36 runs inside one command of at most 10 minutes
        "met": grid["finished"] == 36 and grid["sweep_commands"] == 1 and (wall or 1e9) <= TARGET_GRID_S,
    }
    summary["targets"] = targets
    if reference is not None:
        summary["reference"] = {
            "folder": str(reference),
            "rows": against_reference(runs, read_reference(reference)),
        }
    return summary


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def render(summary: dict[str, Any]) -> str:
    """Markdown of :func:`summarise`'s dict."""
    lines = ["## GPU session", "", *[f"    {line}" for line in summary["machine"]], ""]
    lines += ["Graph tests: " + (" / ".join(summary["tests"]) or "no output"), ""]
    if summary["probe"]:
        lines += [
            "| method | mode | median s/round | s per 100 rounds | best acc | recorded | replayed | eager "
            "| record s |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in summary["probe"]:
            cells = [r["median_round_s"], r["run_s"], r["best_acc"], r["captured"], r["replayed"], r["eager"]]
            cells.append(r["record_s"])
            lines.append(f"| {r['method']} | {r['mode']} | " + " | ".join(_fmt(c) for c in cells) + " |")
        lines.append("")
    grid = summary["grid"]
    commands = (
        f" (summed over {grid['sweep_commands']} commands)" if grid.get("sweep_commands", 1) > 1 else ""
    )
    lines.append(
        f"Grid: {grid['finished']} of 36 runs finished, {grid['rounds_done']} of {GRID_ROUNDS} rounds in "
        f"{_fmt(grid['sweep_s'])} s of sweep{commands}; at that rate the whole grid takes "
        f"{_fmt(grid['projected_s'])} s (a lower bound when it was cut short)."
    )
    if grid.get("max_gpu_memory_mib") is not None:
        lines.append(f"  GPU memory used during the sweep, at most {grid['max_gpu_memory_mib']:.0f} MiB")
    finished = [r for r in grid["runs"] if r["rounds"] >= 100]
    for method in sorted({r["method"] for r in finished}):
        times = [r["seconds"] for r in finished if r["method"] == method]
        lines.append(
            f"  {method}: {len(times)} finished runs, {min(times):.0f}-{max(times):.0f} s each "
            f"(median {statistics.median(times):.0f} s, packed)"
        )
    lines += ["", "| target | limit | measured |", "|---|---:|---|"]
    for name, t in summary["targets"].items():
        if name == "grid":
            verdict = "met: 36 runs in one command" if t.get("met") else "not met in one command"
            measured = f"projected {_fmt(t['projected_s'])} s; {verdict}"
        else:
            measured = f"alone {_fmt(t['alone_best_s'])} s, packed {_fmt(t['packed_amortised_s'])} s a run"
        lines.append(f"| {name} | {t['limit_s']:.0f} s | {measured} |")
    if "reference" in summary:
        lines += [
            "",
            f"Accuracy against {summary['reference']['folder']} (points, this grid minus it, paired by seed, "
            "finished runs):",
            "",
            "| setting | method | seeds | best | last-10 |",
            "|---|---|---:|---:|---:|",
        ]
        for r in summary["reference"]["rows"]:
            lines.append(
                f"| {r['setting']} | {r['method']} | {r['seeds']} | {r['best_points']:+.2f} "
                f"| {r['last10_points']:+.2f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "folders",
        type=Path,
        nargs="+",
        help="where the session's files came back to, one per command, in order",
    )
    parser.add_argument("--json", type=Path, help="also write the summary as JSON here")
    parser.add_argument(
        "--reference",
        type=Path,
        help="archived runs of the same grid to compare accuracy with (studies/flea_table1_har/h100/runs)",
    )
    args = parser.parse_args()
    for folder in [*args.folders, *([args.reference] if args.reference else [])]:
        if not folder.is_dir():
            print(f"gpu_session_summary.py: error: no folder {folder}", file=sys.stderr)
            return 2
    summary = summarise(*args.folders, reference=args.reference)
    print(render(summary), end="")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
