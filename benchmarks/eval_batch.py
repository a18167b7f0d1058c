"""Evaluation batch size: :func:`fedaug.engine.evaluation.evaluate` with batch 256, 1024 and the whole set.

``evaluate`` already runs under ``torch.inference_mode`` with ``engine.eval_batch_size`` (default 1024). This
times it for a few batch sizes on the UCI-HAR test-set shape (HARNet, 2947 windows), interleaved in one
process, contiguous and channels-last (the ``engine.channels_last: auto`` evaluation model). Writes JSON.

Usage::

    python benchmarks/eval_batch.py
    python benchmarks/eval_batch.py --device cuda --batches 1024 2947 8192 --out /tmp/eval_batch_cuda.json
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from fedaug.engine.evaluation import evaluate
from fedaug.models import build_model
from machine import (  # benchmarks/ is the script's directory
    add_device_argument,
    benchmark_device,
    clock,
    machine_facts,
    write_report,
)

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[256, 1024, 2947])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "eval_batch.json"))
    add_device_argument(parser)
    args = parser.parse_args()
    device = benchmark_device(args.device)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(2947, 1, 128, 3, generator=gen), torch.arange(2947) % 6
    x, y = x.to(device), y.to(device)
    models = {"contiguous": build_model("harnet", num_classes=6, input_shape=(1, 128, 3)).to(device)}
    models["channels_last"] = build_model("harnet", num_classes=6, input_shape=(1, 128, 3)).to(device)
    models["channels_last"].load_state_dict(models["contiguous"].state_dict())
    models["channels_last"].to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    times: dict[str, list[float]] = {f"{m}/{b}": [] for m in models for b in args.batches}
    for _ in range(args.repeats + 1):  # the first pass warms up and is dropped
        for key in times:
            name, batch = key.split("/")
            start = clock(device)
            evaluate(models[name], x, y, num_classes=6, batch_size=int(batch))
            times[key].append(clock(device) - start)
    result = {
        "model": "harnet",
        "test_size": 2947,
        "threads": 1,
        "note": "medians of interleaved repeats in one process; the machine may be shared (see loadavg)",
        **machine_facts(device),
        "eval_s": {key: statistics.median(t[1:]) for key, t in times.items()},
    }
    write_report(args.out, result, echo=True)


if __name__ == "__main__":
    main()
