"""How long fedaug's commands take to start: ``--help``/``--version``/``list``, and a whole ``fedaug run``.

Each command is a fresh interpreter (``python -m fedaug ...`` on a checkout's ``src``, as the ``fedaug``
console script runs it); the commands alternate within each repeat, so that load from other processes hits
all of them alike.

* Default: ``fedaug --help``, ``--version`` and ``list`` beside ``python -c "import torch"``; per command
  the wall-clock median and minimum over the repeats (seconds) and the median's ratio to importing torch
  (target for ``--help``: at most 0.5) -> ``benchmarks/results/cli_startup.json``.
* ``--run``: whole ``fedaug run`` commands (:data:`RUN_CASES`: tiny rounds, so that the start-up is most of
  them) of this checkout's ``src`` ("after") and, with ``--before REV``, of that git revision's ``src``
  ("before", extracted to a temporary folder), in pairs whose order alternates (before-after, after-before,
  ...). Per case and tree: the command's wall time and its time outside the rounds (wall minus every run's
  ``round_time`` from ``timings.jsonl``: start-up, summaries, curves, exit), medians and samples; for a tree
  that records it, the start-up breakdown of the command's first run (:mod:`fedaug.runtime.startup`, the
  median of
  each phase). Both trees run with one thread on the same data.

* ``--smoke``: a whole ``fedaug run smoke`` (one round of one client epoch, one thread) beside
  ``python -c "import torch"``, alternating: per command the wall-clock median and minimum, and for the run
  its time outside the round, its start-up breakdown (:mod:`fedaug.runtime.startup`: ``total_s`` plus the
  interpreter's own ``python_s``) and the medians' ratios to importing torch (what is left above 1 is
  fedaug's own start-up); one more run in a probe interpreter says whether ``torch._dynamo`` was imported
  (it must not be: :mod:`fedaug.runtime.lazy_dynamo`) -> ``benchmarks/results/cli_startup_smoke.json``.

Usage::

    python benchmarks/cli_startup.py                 # 7 repeats -> benchmarks/results/cli_startup.json
    python benchmarks/cli_startup.py --smoke --repeats 5   # -> benchmarks/results/cli_startup_smoke.json
    python benchmarks/cli_startup.py --repeats 15 --out /tmp/cli.json
    python benchmarks/cli_startup.py --run --before main --out benchmarks/results/cold_start_cpu.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from machine import machine_facts, write_report  # benchmarks/ is the script's directory

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
COMMANDS = {
    "import torch": ["-c", "import torch"],
    "fedaug --help": ["-m", "fedaug", "--help"],
    "fedaug --version": ["-m", "fedaug", "--version"],
    "fedaug list": ["-m", "fedaug", "list"],
}
"""What is timed by default: python's arguments per command."""
TINY = ["--set", "train.rounds=1", "--set", "train.local_epochs=1", "--set", "engine.num_threads=1"]
RUN_CASES = {
    "smoke": ["smoke", *TINY],  # synthetic data, one method
    "default_fedavg_flea": ["default", *TINY, "--set", "train.clients_per_round=1"],  # UCI-HAR, two methods
}
"""``--run``: the arguments after ``fedaug run`` of each case."""


def wall_time(args: list[str], src: Path = SRC) -> float:
    """Seconds one ``python ARGS`` takes from start to exit (its output discarded; a failure raises)."""
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"cli_startup.py: python {' '.join(args)} failed:\n{done.stderr}")
    return seconds


def stats(samples: list[float]) -> dict[str, Any]:
    return {
        "median_s": round(statistics.median(samples), 4),
        "min_s": round(min(samples), 4),
        "samples_s": [round(s, 4) for s in samples],
    }


def help_commands(args: argparse.Namespace) -> dict[str, Any]:
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for command in COMMANDS.values():  # one unmeasured run each: files into the page cache
        wall_time(command)
    for _ in range(args.repeats):
        for name, command in COMMANDS.items():
            times[name].append(wall_time(command))
    torch_median = statistics.median(times["import torch"])
    summary = {
        name: {
            **stats(samples),
            "median_over_import_torch": round(statistics.median(samples) / torch_median, 3),
        }
        for name, samples in times.items()
    }
    for name, entry in summary.items():
        print(f"{name:<18} median {entry['median_s']:.3f} s  min {entry['min_s']:.3f} s")
    return {
        "what": "wall-clock seconds of a fresh `python ARGS` per command, alternating, one warm-up each",
        "commands": summary,
    }


def one_run(case: str, src: Path, out_dir: Path, data_dir: str) -> dict[str, Any]:
    """One ``fedaug run`` of ``case`` on ``src``: wall time, time outside the rounds, start-up breakdown."""
    command = ["-m", "fedaug", "run", *RUN_CASES[case], "--out-dir", str(out_dir), "--data-dir", data_dir]
    wall = wall_time(command, src)
    timings = [
        [json.loads(line) for line in p.read_text().splitlines()] for p in out_dir.rglob("timings.jsonl")
    ]
    rounds = math.fsum(r["round_time"] for records in timings for r in records)
    startup = next((r[0]["startup"] for r in timings if r and "startup" in r[0]), None)
    return {"wall_s": wall, "outside_rounds_s": wall - rounds, "startup": startup}


DYNAMO_PROBE = """
import json, sys
from fedaug.cli.main import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "dynamo": sorted(m for m in sys.modules if m.startswith("torch._dynamo"))}))
"""
"""``--smoke``: a run in an interpreter that reports the ``torch._dynamo`` modules it imported."""


def smoke_vs_torch(args: argparse.Namespace) -> dict[str, Any]:
    """``fedaug run smoke`` (:data:`RUN_CASES`) of this checkout (and, with ``--before REV``, of that
    revision's ``src``) beside ``python -c "import torch"``, in turns whose order alternates."""
    before_commit = git("rev-parse", args.before) if args.before else None
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"after": SRC}
        if args.before:
            trees = {"before": extract_src(args.before, Path(tmp)), **trees}
        torch_s: list[float] = []
        runs: dict[str, list[dict[str, Any]]] = {tree: [] for tree in trees}
        for repeat in range(args.repeats + 1):  # the first pass warms the page cache and is dropped
            turns = ["import torch", *trees]
            for what in turns if repeat % 2 == 0 else reversed(turns):
                if what == "import torch":
                    seconds = wall_time(COMMANDS["import torch"])
                    if repeat:
                        torch_s.append(seconds)
                    continue
                row = one_run("smoke", trees[what], Path(tmp) / f"smoke{repeat}_{what}", args.data_dir)
                if repeat:
                    runs[what].append(row)
                    print(
                        f"{what}: smoke wall {row['wall_s']:.2f} s, "
                        f"start-up {row['startup']['total_s']:.2f} s"
                    )
        probes = {tree: dynamo_probe(src, Path(tmp) / f"probe_{tree}") for tree, src in trees.items()}
    torch_median = statistics.median(torch_s)
    summary: dict[str, Any] = {"import torch": stats(torch_s)}
    for tree, rows in runs.items():
        breakdowns = [r["startup"] for r in rows]
        starts = [b["total_s"] + (b["python_s"] or 0.0) for b in breakdowns]
        phases = dict.fromkeys(p for b in breakdowns for p in b["phases"])
        summary[f"fedaug run smoke ({tree})"] = entry = {
            "wall_s": stats([r["wall_s"] for r in rows]),
            "outside_rounds_s": stats([r["outside_rounds_s"] for r in rows]),
            "startup_with_python_s": stats(starts),
            "startup_phase_median_s": {
                p: round(statistics.median(b["phases"].get(p, 0.0) for b in breakdowns), 4) for p in phases
            },
            "wall_over_import_torch": round(statistics.median(r["wall_s"] for r in rows) / torch_median, 3),
            "startup_over_import_torch": round(statistics.median(starts) / torch_median, 3),
            "torch_dynamo_imported": probes[tree],
        }
        print(
            f"{tree}: start-up {statistics.median(starts):.2f} s = {entry['startup_over_import_torch']}x "
            f"import torch ({torch_median:.2f} s); torch._dynamo imported: {bool(probes[tree])}"
        )
    return {
        "what": "fresh `fedaug run smoke` commands (1 round, 1 thread) and `python -c 'import torch'`, in "
        "alternating order, one warm-up pass; start-up = the run's recorded start-up plus the interpreter's "
        "own start",
        "args": " ".join(RUN_CASES["smoke"]),
        "before": args.before,
        "before_commit": before_commit,
        "after_commit": git("rev-parse", "HEAD")
        + (" + uncommitted changes" if git("status", "--porcelain", "src") else ""),
        "commands": summary,
    }


def dynamo_probe(src: Path, out_dir: Path) -> list[str]:
    """The ``torch._dynamo`` modules a smoke run of ``src`` imports (:data:`DYNAMO_PROBE`)."""
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    argv = ["run", *RUN_CASES["smoke"], "--out-dir", str(out_dir)]
    done = subprocess.run(
        [sys.executable, "-c", DYNAMO_PROBE, *argv], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"cli_startup.py: the dynamo probe failed:\n{done.stderr}")
    modules: list[str] = json.loads(done.stdout.strip().splitlines()[-1])["dynamo"]
    return modules


def extract_src(revision: str, into: Path) -> Path:
    """``revision``'s ``src/`` extracted under ``into``."""
    archive = subprocess.run(["git", "archive", revision, "src"], cwd=REPO, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


def alternated(
    trees: dict[str, Path], methods: list[str], repeats: int, run: Callable[[Path, str], dict[str, Any]]
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """``run(tree, method)`` for each method in each tree, ``repeats`` times, the trees' order alternating
    repeat by repeat so that load from others on a shared machine hits all alike: method -> tree -> runs."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {m: {t: [] for t in trees} for m in methods}
    for repeat in range(repeats):
        order = list(trees) if repeat % 2 == 0 else list(reversed(trees))
        for method in methods:
            for tree in order:
                runs[method][tree].append(run(trees[tree], method))
                print(f"repeat {repeat}: {method} {tree} done", file=sys.stderr)
    return runs


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def run_commands(args: argparse.Namespace) -> dict[str, Any]:
    before_commit = git("rev-parse", args.before) if args.before else None
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"after": SRC}
        if before_commit:
            trees = {"before": extract_src(args.before, Path(tmp)), **trees}
        rows: dict[str, dict[str, list[dict[str, Any]]]] = {c: {t: [] for t in trees} for c in RUN_CASES}
        for repeat in range(args.repeats + 1):  # the first pass warms the page cache and is dropped
            order = list(trees) if repeat % 2 == 0 else list(reversed(trees))
            for case in RUN_CASES:
                for tree in order:
                    row = one_run(case, trees[tree], Path(tmp) / f"runs{repeat}_{case}_{tree}", args.data_dir)
                    if repeat:
                        rows[case][tree].append(row)
                        print(
                            case,
                            tree,
                            f"wall {row['wall_s']:.2f} s outside rounds {row['outside_rounds_s']:.2f} s",
                        )
    return {
        "what": "fresh `fedaug run` commands per source tree, pairs in alternating order, one warm-up pass",
        "before": args.before,
        "before_commit": before_commit,
        "after_commit": git("rev-parse", "HEAD")
        + (" + uncommitted changes" if git("status", "--porcelain", "src") else ""),
        "cases": {
            case: {"args": " ".join(RUN_CASES[case]), **summarize(by_tree)} for case, by_tree in rows.items()
        },
    }


def summarize(by_tree: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per tree: wall and outside-rounds statistics and the median start-up phases; after/before ratios."""
    out: dict[str, Any] = {}
    for tree, rows in by_tree.items():
        entry = {key: stats([r[key] for r in rows]) for key in ("wall_s", "outside_rounds_s")}
        breakdowns = [r["startup"] for r in rows if r["startup"] is not None]
        if breakdowns:
            phases = breakdowns[0]["phases"]
            entry["startup_total_s"] = stats([b["total_s"] for b in breakdowns])
            entry["startup_phase_median_s"] = {
                p: round(statistics.median(b["phases"].get(p, 0.0) for b in breakdowns), 4) for p in phases
            }
        out[tree] = entry
    if "before" in out:
        out["after_over_before_wall"] = round(
            out["after"]["wall_s"]["median_s"] / out["before"]["wall_s"]["median_s"], 3
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="runs of each command (default 7)")
    parser.add_argument("--run", action="store_true", help="time whole `fedaug run` commands (RUN_CASES)")
    parser.add_argument(
        "--before", help="with --run or --smoke: a git revision whose src/ is timed beside this one's"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="a whole `fedaug run smoke` beside `python -c 'import torch'`"
    )
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("FEDAUG_DATA") or str(REPO.parent / "shared" / "data"),
        help="with --run: the datasets (default $FEDAUG_DATA, else ../shared/data)",
    )
    parser.add_argument("--out", help="JSON file (default benchmarks/results/cli_startup.json without --run)")
    args = parser.parse_args()
    default_out = REPO / "benchmarks" / "results" / "cli_startup.json"
    if args.run:
        if args.out is None:
            parser.error("--run needs --out (e.g. benchmarks/results/cold_start_cpu.json)")
        report = run_commands(args)
    elif args.smoke:
        report = smoke_vs_torch(args)
        default_out = default_out.with_name("cli_startup_smoke.json")
    else:
        report = help_commands(args)
    report = {**report, "repeats": args.repeats, "machine": machine_facts(torch.device("cpu"))}
    write_report(args.out or default_out, report)


if __name__ == "__main__":
    main()
