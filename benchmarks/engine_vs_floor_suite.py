"""Engine vs floor on every preset x method x precision case: one command, one JSON (results/run_all.json).

For every case (preset x method x precision) it runs ``benchmarks/engine_vs_floor.py`` in a fresh
subprocess (so that peak memory is per case), a few rounds each:

* ``default``: the default preset (configs/default.yaml: HARNet on UCI-HAR, Qua(2), K = 75): FedAvg as
  before this issue (``engine.channels_last=none``) and now, FLea, and FedAvg in bf16;
* ``small``: benchmarks/presets/fmnist_bncnn.yaml (the BN CNN on Fashion-MNIST, 100 shard clients): FedAvg,
  FedAvg with ``engine.batched_clients``, FLea; ``small-mlp``: the same with the MLP, FedAvg sequential and
  batched. Without Fashion-MNIST files (../shared/data or the Debian package) they use synthetic data of the
  same shape and say so in the JSON (``dataset_source``, ``note``).

Each case reports time per round split into local training, evaluation, aggregation, share phase and
checkpoint, the bare compute floor of the same steps, the overhead over it, peak memory and runs per hour
(for the preset's full number of rounds). ``--device`` (default ``auto``) is every case's device (``--device``
of engine_vs_floor.py); the bf16 case is skipped by default only on a CPU without native bfloat16. Not part of
the test suite.

Usage::

    python benchmarks/engine_vs_floor_suite.py       # everything (about 15-25 min on 1 loaded core)
    python benchmarks/engine_vs_floor_suite.py --only default/fedavg --rounds 3 --out /tmp/x.json
    python benchmarks/engine_vs_floor_suite.py --device cuda --out /tmp/run_all_cuda.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from machine import (  # benchmarks/ is the script's directory
    add_device_argument,
    benchmark_device,
    cpu_facts,
    device_facts,
    write_report,
)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
DEBIAN_FMNIST = Path("/usr/share/datasets/fashion-mnist")
SYNTHETIC_FMNIST = [
    "data.name=synthetic",
    "data.shape=[1, 28, 28]",
    "data.num_classes=10",
    "data.num_train=60000",
    "data.num_test=10000",
]


def small_data_overrides() -> tuple[list[str], str]:
    """Overrides that point the small preset at Fashion-MNIST, or at same-shape synthetic data."""
    if (SHARED_DATA / "fashion_mnist").is_dir():
        return [f"data.data_dir={SHARED_DATA}"], "Fashion-MNIST from ../shared/data"
    if DEBIAN_FMNIST.is_dir():
        return [], "Fashion-MNIST from the Debian package"
    return SYNTHETIC_FMNIST, "no Fashion-MNIST files: synthetic data of the same shape (60000/10000, 1x28x28)"


def cases(threads: int) -> list[dict[str, Any]]:
    """Every benchmark case: name, preset files and overrides."""
    default = [str(REPO / "configs" / "default.yaml")]
    small = [str(REPO / "benchmarks" / "presets" / "fmnist_bncnn.yaml")]
    small_data, small_note = small_data_overrides()
    common = [f"engine.num_threads={threads}", "compare=[]"]
    cases = _cases(default, small, small_data, common)
    for case in cases:
        if case["name"].startswith("small"):
            case["data_note"] = small_note
    return cases


def _cases(
    default: list[str], small: list[str], small_data: list[str], common: list[str]
) -> list[dict[str, Any]]:
    mlp = [*small_data, "model.name=mlp"]
    return [
        {
            "name": "default/fedavg-before",
            "configs": default,
            "overrides": [*common, "method=fedavg", "engine.channels_last=none"],
            "note": "the engine before this issue's changes (channels_last none)",
        },
        {"name": "default/fedavg", "configs": default, "overrides": [*common, "method=fedavg"]},
        {"name": "default/flea", "configs": default, "overrides": [*common, "method=flea"]},
        {
            "name": "default/fedavg-bf16",
            "configs": default,
            "overrides": [*common, "method=fedavg", "engine.precision=bf16"],
        },
        {"name": "small/fedavg", "configs": small, "overrides": [*common, *small_data, "method=fedavg"]},
        {
            "name": "small/fedavg-batched",
            "configs": small,
            "overrides": [*common, *small_data, "method=fedavg", "engine.batched_clients=true"],
        },
        {"name": "small/flea", "configs": small, "overrides": [*common, *small_data, "method=flea"]},
        {"name": "small-mlp/fedavg", "configs": small, "overrides": [*common, *mlp, "method=fedavg"]},
        {
            "name": "small-mlp/fedavg-batched",
            "configs": small,
            "overrides": [*common, *mlp, "method=fedavg", "engine.batched_clients=true"],
        },
    ]


def run_case(case: dict[str, Any], rounds: int, threads: int, timeout: float, device: str) -> dict[str, Any]:
    """Runs one case on ``device`` in a subprocess and returns its result (or the error)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "case.json"
        command = [sys.executable, str(REPO / "benchmarks" / "engine_vs_floor.py"), *case["configs"]]
        command += ["--rounds", str(rounds), "--out", str(out), "--device", device]
        for override in case["overrides"]:
            command += ["--set", override]
        start = time.perf_counter()
        try:
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            return {"error": [f"timed out after {timeout:.0f} s (--timeout)"], "returncode": None}
        if done.returncode != 0:
            return {"error": done.stderr.strip().splitlines()[-1:], "returncode": done.returncode}
        result: dict[str, Any] = json.loads(out.read_text())
    result["case_wall_s"] = time.perf_counter() - start
    result["note"] = " ".join(n for n in (case.get("note", ""), case.get("data_note", "")) if n)
    return result


def table(results: dict[str, dict[str, Any]]) -> str:
    """A Markdown table of the cases."""
    lines = [
        "| case | s/round | train | eval | aggr+share+ckpt | floor | ratio to floor | peak MiB | runs/h |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        if "error" in r or "skipped" in r:
            lines.append(f"| {name} | {r.get('error') or r['skipped']} |  |  |  |  |  |  |  |")
            continue
        e = r["engine"]
        rest = e["aggregate"] + e["share"] + e["checkpoint"]
        lines.append(
            f"| {name} | {e['round_time']:.2f} | {e['train']:.2f} | {e['eval']:.2f} | {rest:.3f} | "
            f"{r['floor']['train_plus_eval']:.2f} | {r['ratio_round']:.3f} | "
            f"{r['memory_mib']['peak_rss']:.0f} | {r['runs_per_hour']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per case (medians skip round 1)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", action="append", default=[], help="case name(s) to run, e.g. small/fedavg")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per case")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "run_all.json"))
    add_device_argument(parser)
    args = parser.parse_args()
    device = benchmark_device(args.device)
    selected = [c for c in cases(args.threads) if not args.only or c["name"] in args.only]
    load_before = os.getloadavg()
    cpu = {**cpu_facts(), **device_facts(device)}
    emulated_bf16 = device.type == "cpu" and not cpu["native_bf16"]
    results: dict[str, dict[str, Any]] = {}
    for case in selected:
        if "engine.precision=bf16" in case["overrides"] and emulated_bf16 and not args.only:
            # emulated bfloat16 is many times slower than float32: not worth a case's timeout by default
            results[case["name"]] = {
                "skipped": "CPU without native bfloat16; run it with --only " + case["name"]
            }
            continue
        print(f"running {case['name']} ...", file=sys.stderr, flush=True)
        results[case["name"]] = run_case(case, args.rounds, args.threads, args.timeout, str(device))
        # a later failure loses no finished case
        write_suite_report(args, load_before, cpu, results, complete=False)
    write_suite_report(args, load_before, cpu, results, complete=True)
    print(table(results))


def write_suite_report(
    args: argparse.Namespace,
    load_before: tuple[float, float, float],
    cpu: dict[str, Any],
    results: dict[str, Any],
    complete: bool,
) -> None:
    """Writes the JSON report (after every case, so that an interrupted suite keeps what it measured);
    ``cpu`` holds the CPU's and the device's facts."""
    report = {
        "rounds": args.rounds,
        "threads": args.threads,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        **cpu,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "notes": "timings on a shared machine; floor and engine of a case run in one process one after the "
        "other, so their ratio is meaningful, absolute seconds are not",
        "complete": complete,
        "cases": results,
    }
    write_report(args.out, report)


if __name__ == "__main__":
    main()
