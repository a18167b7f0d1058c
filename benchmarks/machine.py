"""Facts about the machine a benchmark ran on, recorded in every benchmark's JSON, and the device it ran on.

Timings depend on the CPU (bf16 is 1.5x faster with AVX-512 BF16 and 14x slower without it) and on what else
ran beside the benchmark (the load average), so every result file names both, and the device it computed on
(``--device``, default ``auto``; :func:`fedaug.runtime.device.device_facts`: for a GPU its name, CUDA and
cuDNN).

CUDA kernels run asynchronously: a benchmark reads its clock with :func:`clock`, which waits for the device's
queued work first (on the CPU it is ``time.perf_counter``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from fedaug.results.portable import portable_text
from fedaug.runtime.device import DeviceError, device_facts, resolve_device
from fedaug.runtime.machine import cpu_facts

__all__ = [
    "add_device_argument",
    "benchmark_device",
    "clock",
    "cpu_facts",
    "device_facts",
    "machine_facts",
    "run_in_tree",
    "synchronize",
    "write_report",
]


def machine_facts(device: torch.device) -> dict[str, Any]:
    """:func:`cpu_facts`, the load average now (a value well above 0 means others shared the cores) and
    :func:`device_facts` of ``device`` (``device``: ``cpu`` or ``cuda:N``, with the GPU's name for a GPU)."""
    return {**cpu_facts(), "loadavg": os.getloadavg(), **device_facts(device)}


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    """``--device`` (default ``auto``), as ``engine.device`` and ``fedaug run --device``."""
    parser.add_argument(
        "--device",
        default="auto",
        help="where to compute: auto (default: cuda if torch sees a GPU, else cpu), cpu, cuda or cuda:N",
    )


def benchmark_device(name: str) -> torch.device:
    """``--device`` resolved on this machine; a device it does not have ends the script with one line and
    exit code 2 (as ``fedaug``)."""
    try:
        return resolve_device(name, key="--device")
    except DeviceError as exc:
        print(f"{Path(sys.argv[0]).name}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def synchronize(device: torch.device) -> None:
    """Waits for the work queued on ``device`` (a CUDA GPU); nothing to wait for on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def clock(device: torch.device) -> float:
    """``time.perf_counter()`` once ``device`` has finished the work queued so far."""
    synchronize(device)
    return time.perf_counter()


def write_report(path: str | Path, report: object, *, echo: bool = False) -> None:
    """Writes ``report`` as indented JSON to ``path`` (making its folder; absolute paths rewritten by
    :func:`fedaug.results.portable.portable_text`), then prints it (``echo``) or
    ``wrote <path>``."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = portable_text(json.dumps(report, indent=2))  # committed: no path of this machine
    out.write_text(text + "\n")
    print(text if echo else f"wrote {out}")


def run_in_tree(tree: Path, script: str, argv: list[str], data_dir: str | None) -> dict[str, Any]:
    """Runs ``script`` with ``argv`` in a fresh one-thread process that imports ``fedaug`` from ``tree`` (a
    ``src`` folder; ``data_dir``: ``$FEDAUG_DATA`` for it) and returns the JSON of its last output line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(Path(__file__).parent)])}
    env["OMP_NUM_THREADS"] = "1"
    if data_dir:
        env["FEDAUG_DATA"] = str(Path(data_dir).resolve())
    done = subprocess.run(
        [sys.executable, script, *argv], env=env, check=True, capture_output=True, text=True
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
