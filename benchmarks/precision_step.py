"""float32 vs bf16 autocast side by side in one process: a batch-32 training step and a test-set evaluation.

Each step goes through the real :func:`fedaug.local_training.train_local` (one epoch over one batch of 32)
and the real :func:`fedaug.engine.evaluation.evaluate`; the two precisions alternate in interleaved repeats
so that load from other processes hits both equally. Reports medians and the speed-up. Writes JSON.

Usage::

    python benchmarks/precision_step.py                                  # HARNet on UCI-HAR shapes
    python benchmarks/precision_step.py --model bn_cnn_mnist --shape 1 28 28 --classes 10
    python benchmarks/precision_step.py --device cuda --out /tmp/precision_step_cuda.json   # bf16 on a GPU
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from fedaug.api import ClientData, TrainSettings
from fedaug.engine.evaluation import evaluate
from fedaug.local_training import cross_entropy_loss, train_local
from fedaug.models import build_model
from machine import (  # benchmarks/ is the script's directory
    add_device_argument,
    benchmark_device,
    clock,
    machine_facts,
    write_report,
)

REPO = Path(__file__).resolve().parents[1]
PRECISIONS = ("float32", "bf16")


def step_seconds(model: torch.nn.Module, data: ClientData, precision: str, steps: int) -> float:
    """Median seconds of one ``train_local`` step on the whole 32-sample ``data`` (on its device)."""
    settings = TrainSettings(local_epochs=1, batch_size=data.num_examples, precision=precision)
    times = []
    for i in range(steps):
        gen = torch.Generator().manual_seed(i)
        start = clock(data.x.device)
        train_local(model, data, loss_fn=cross_entropy_loss, settings=settings, generator=gen)
        times.append(clock(data.x.device) - start)
    return statistics.median(times)


def eval_seconds(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, classes: int, precision: str
) -> float:
    start = clock(x.device)
    evaluate(model, x, y, num_classes=classes, batch_size=1024, precision=precision)
    return clock(x.device) - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="harnet")
    parser.add_argument("--shape", type=int, nargs="+", default=[1, 128, 3])
    parser.add_argument("--classes", type=int, default=6)
    parser.add_argument("--test-size", type=int, default=2947, help="evaluation set size (UCI-HAR: 2947)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="steps per repeat")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "precision_step_harnet.json"))
    add_device_argument(parser)
    args = parser.parse_args()
    device = benchmark_device(args.device)
    torch.set_num_threads(args.threads)
    shape = tuple(args.shape)
    gen = torch.Generator().manual_seed(0)  # inputs made on the CPU, then moved to the device
    x = torch.randn(32, *shape, generator=gen).to(device)
    data = ClientData(0, x, (torch.arange(32) % args.classes).to(device), args.classes)
    test_x = torch.randn(args.test_size, *shape, generator=gen).to(device)
    test_y = (torch.arange(args.test_size) % args.classes).to(device)
    model = build_model(args.model, num_classes=args.classes, input_shape=shape).to(device)
    for precision in PRECISIONS:  # warm-up: oneDNN kernel selection for both precisions
        step_seconds(model, data, precision, 3)
        eval_seconds(model, test_x, test_y, args.classes, precision)
    step: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    ev: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    for _ in range(args.repeats):
        for precision in PRECISIONS:
            step[precision].append(step_seconds(model, data, precision, args.steps))
            ev[precision].append(eval_seconds(model, test_x, test_y, args.classes, precision))
    result = {
        "model": args.model,
        "input_shape": list(shape),
        "threads": torch.get_num_threads(),
        "batch_size": 32,
        "test_size": args.test_size,
        "step_ms": {p: 1000 * statistics.median(v) for p, v in step.items()},
        "eval_s": {p: statistics.median(v) for p, v in ev.items()},
        "speedup_step": statistics.median(step["float32"]) / statistics.median(step["bf16"]),
        "speedup_eval": statistics.median(ev["float32"]) / statistics.median(ev["bf16"]),
        "note": "medians of interleaved repeats in one process; the machine may be shared (see loadavg)",
        **machine_facts(device),
    }
    write_report(args.out, result, echo=True)


if __name__ == "__main__":
    main()
