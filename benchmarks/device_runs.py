"""Whole runs on one device: wall time, time per round and accuracy of FedAvg and FLea on a preset -> JSON.

The check of "Run on a GPU": the default preset (UCI-HAR, HARNet, Qua(2), K = 75, 100 rounds, seed 0) on
``--device`` (default ``auto``), each method from scratch, next to what the same seed gave on our CPU and what
the FLea authors' code takes per round on an H200 (both quoted, not re-measured here).

Usage::

    python benchmarks/device_runs.py --device cuda --out benchmarks/results/device_runs_h200.json
    python benchmarks/device_runs.py --device cpu --rounds 2 --out /tmp/x.json      # a quick check
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import fedaug.experiments.runner as runner  # noqa: E402
from fedaug.device import device_facts, resolve_device  # noqa: E402
from fedaug.engine.checkpoint import read_jsonl  # noqa: E402
from fedaug.errors import FedaugError  # noqa: E402
from fedaug.experiments.load import load_config  # noqa: E402
from fedaug.experiments.runner import run_experiment  # noqa: E402
from fedaug.reproducibility.identity import run_dir_for  # noqa: E402
from machine import write_report  # noqa: E402  (benchmarks/ is the script's directory)

CPU_REFERENCE = {
    "source": "studies/uci_har_qua2_k75/README.md (2 shared CPU cores, 1 thread, seed 0, 100 rounds)",
    "fedavg": {"best_acc": 0.7486, "last10_acc": 0.6069, "wall_s": 64.4 * 60, "median_round_s": 32.5},
    "flea": {"best_acc": 0.5562, "last10_acc": 0.5036, "wall_s": 81.1 * 60, "median_round_s": 42.2},
}
OFFICIAL_CODE_H200: dict[str, Any] = {
    "source": "the FLea authors' code on an H200, one process, this setting (issue 'Run on a GPU')",
    "fedavg": {"round_s": 1.3},
    "flea": {"round_s": 8.0},
}


@contextmanager
def timed(module: Any, name: str, seconds: list[float]) -> Iterator[None]:
    """``module.name`` wrapped so that each call's duration is appended to ``seconds``."""
    original = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - began)

    setattr(module, name, wrapper)
    try:
        yield
    finally:
        setattr(module, name, original)


def run_one(method: str, args: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    """Runs ``method`` from scratch on the preset and returns its times and summary."""
    overrides = [
        f"method={method}",
        "compare=[]",
        f"engine.device={args.device}",
        f"out_dir={out_dir}",
        f"train.rounds={args.rounds}",
        *args.overrides,
    ]
    config = load_config([args.config], overrides)
    device = resolve_device(config.engine.device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    resolving: list[float] = []
    start = time.perf_counter()
    with timed(runner, "resolve_run", resolving):
        summary = run_experiment(config, fresh=True)
    wall = time.perf_counter() - start
    rounds = [r["round_time"] for r in read_jsonl(run_dir_for(config) / "timings.jsonl")]
    result: dict[str, Any] = {
        "method": method,
        "rounds": len(rounds),
        "wall_s": round(wall, 2),
        # the wall time outside the rounds, and the part of it that resolving the config took (loading and
        # partitioning the data, building the method; the process's first run also pays one-time imports)
        "outside_rounds_s": round(wall - sum(rounds), 2),
        "resolve_s": round(sum(resolving), 2),
        "first_round_s": round(rounds[0], 4),
        "median_round_s": round(statistics.median(rounds), 4),
        "mean_round_s": round(statistics.fmean(rounds), 4),
        **{k: summary[k] for k in ("best_acc", "best_round", "last10_acc", "final_acc") if k in summary},
    }
    if device.type == "cuda":
        result["peak_gpu_memory_mib"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    official = OFFICIAL_CODE_H200.get(method)
    if official is not None:
        result["speedup_vs_official_h200_per_round"] = round(
            official["round_s"] / result["median_round_s"], 2
        )
    print(json.dumps(result), flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    parser.add_argument("--methods", default="fedavg,flea", help="comma-separated (default fedavg,flea)")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--config", default=str(REPO / "configs" / "default.yaml"))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--runs-dir", help="keep the run dirs here (default: a temporary folder)")
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args()
    device = resolve_device(args.device, key="--device")
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(args.runs_dir) if args.runs_dir else Path(tmp)
        runs = [run_one(m.strip(), args, out_dir) for m in args.methods.split(",") if m.strip()]
    report = {
        "benchmark": "device_runs",
        "config": args.config,
        "overrides": args.overrides,
        **device_facts(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "runs": runs,
        "cpu_reference": CPU_REFERENCE,
        "official_code_h200": OFFICIAL_CODE_H200,
    }
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except FedaugError as exc:
        print(f"device_runs: error: {exc}", file=sys.stderr)
        sys.exit(2)
