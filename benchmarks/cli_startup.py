"""How long ``fedaug --help``, ``--version`` and ``list`` take, beside ``python -c "import torch"``.

Each command is a fresh interpreter (``python -m fedaug ...`` on this checkout's ``src``, as the ``fedaug``
console script runs it); the commands alternate within each repeat, so that load from other processes hits
all of them alike. Reported per command: the wall-clock median and minimum over the repeats (seconds), and
the median's ratio to importing torch (target for ``--help``: at most 0.5).

Usage::

    python benchmarks/cli_startup.py                 # 7 repeats -> benchmarks/results/cli_startup.json
    python benchmarks/cli_startup.py --repeats 15 --out /tmp/cli.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from machine import machine_facts, write_report  # benchmarks/ is the script's directory

SRC = Path(__file__).resolve().parents[1] / "src"
COMMANDS = {
    "import torch": ["-c", "import torch"],
    "fedaug --help": ["-m", "fedaug", "--help"],
    "fedaug --version": ["-m", "fedaug", "--version"],
    "fedaug list": ["-m", "fedaug", "list"],
}
"""What is timed: python's arguments per command."""


def wall_time(args: list[str]) -> float:
    """Seconds one ``python ARGS`` takes from start to exit (its output discarded; a failure raises)."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="runs of each command (default 7)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "cli_startup.json"))
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for command in COMMANDS.values():  # one unmeasured run each: files into the page cache
        wall_time(command)
    for _ in range(args.repeats):
        for name, command in COMMANDS.items():
            times[name].append(wall_time(command))
    torch_median = statistics.median(times["import torch"])
    summary = {
        name: {
            "median_s": round(statistics.median(samples), 4),
            "min_s": round(min(samples), 4),
            "median_over_import_torch": round(statistics.median(samples) / torch_median, 3),
            "samples_s": [round(s, 4) for s in samples],
        }
        for name, samples in times.items()
    }
    write_report(
        args.out,
        {
            "what": "wall-clock seconds of a fresh `python ARGS` per command, alternating, one warm-up each",
            "repeats": args.repeats,
            "commands": summary,
            "machine": machine_facts(torch.device("cpu")),
        },
    )
    for name, entry in summary.items():
        print(
            f"{name:<18} median {entry['median_s']:.3f} s  min {entry['min_s']:.3f} s  "
            f"({entry['median_over_import_torch']:.2f} x import torch)"
        )


if __name__ == "__main__":
    main()
