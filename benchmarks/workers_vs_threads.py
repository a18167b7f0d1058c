"""Runs per hour: two independent runs with one thread each in parallel vs one run at a time with two threads.

Both modes run the same two short runs (the default preset, FedAvg, seeds 0 and 1, a few rounds) through
``fedaug sweep``: ``--workers 2`` (each run ``engine.num_threads=1``, the sweep default) against
``--workers 1 --set engine.num_threads=2``. The modes alternate (A, B, A, B, ...) so that changing load from
other processes hits both. Throughput is measured in rounds per wall-clock hour (process start-up and data
loading included) and converted to 100-round runs per hour. ``--device`` (default ``auto``) is every run's
``engine.device`` (on a GPU, the two workers share it). Writes JSON.

Usage::

    python benchmarks/workers_vs_threads.py --rounds 3 --repeats 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from machine import (  # benchmarks/ is the script's directory
    add_device_argument,
    benchmark_device,
    device_facts,
    write_report,
)

REPO = Path(__file__).resolve().parents[1]
MODES = {
    "2 runs x 1 thread (sweep --workers 2)": ["--workers", "2"],
    "1 run x 2 threads (sweep --workers 1, num_threads=2)": [
        "--workers",
        "1",
        "--set",
        "engine.num_threads=2",
    ],
}


def sweep_file(folder: Path, rounds: int) -> Path:
    path = folder / "parallel.yaml"
    path.write_text(
        f"extends: {REPO / 'configs' / 'default.yaml'}\n"
        "name: parallel_bench\ncompare: []\nmethod: {name: fedavg}\n"
        f"train: {{rounds: {rounds}}}\nengine: {{progress: false}}\ngrid: {{seed: [0, 1]}}\n"
    )
    return path


def run_mode(args: list[str], rounds: int, device: str) -> float:
    """Wall seconds of the two-run sweep on ``device`` in a fresh output folder."""
    with tempfile.TemporaryDirectory() as tmp:
        config = sweep_file(Path(tmp), rounds)
        env = {**os.environ, "OMP_NUM_THREADS": "2"}  # allow 2; the runs set their own thread count
        start = time.perf_counter()
        command = [sys.executable, "-m", "fedaug", "sweep", str(config), "--out-dir", f"{tmp}/runs", *args]
        command += ["--set", f"engine.device={device}"]
        subprocess.run(command, env=env, check=True, capture_output=True)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "parallel_runs.json"))
    add_device_argument(parser)
    args = parser.parse_args()
    device = benchmark_device(args.device)
    load_before = os.getloadavg()
    walls: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(args.repeats):
        for mode, extra in MODES.items():
            walls[mode].append(run_mode(extra, args.rounds, str(device)))
    result: dict[str, Any] = {
        "preset": "configs/default.yaml, fedavg, seeds 0 and 1",
        "rounds_per_run": args.rounds,
        "cpu_count": os.cpu_count(),
        **device_facts(device),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "note": "wall time includes process start and data loading; a loadavg well above 0 before the run "
        "means other processes shared the cores, and then the split of CPU time between modes is not that "
        "of an idle machine",
        "modes": {},
    }
    for mode, times in walls.items():
        wall = statistics.median(times)
        rounds_per_hour = 2 * args.rounds * 3600 / wall
        result["modes"][mode] = {
            "wall_s": times,
            "rounds_per_hour": rounds_per_hour,
            "runs_per_hour_100_rounds": rounds_per_hour / 100,
        }
    write_report(args.out, result, echo=True)


if __name__ == "__main__":
    main()
