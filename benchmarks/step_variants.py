"""Channels-last memory format vs the default (contiguous NCHW), side by side in one process.

For each model, one batch-32 training step (forward, CE, backward, Adam) and one evaluation pass of the
test-set size are timed with the model in ``torch.contiguous_format`` and in ``torch.channels_last`` (inputs
stay NCHW, as in the engine's ``engine.channels_last``), alternating in interleaved repeats so that load from
other processes hits both.
Reports medians and the speed-up of channels-last (> 1 means faster). Writes JSON.

Usage::

    python benchmarks/channels_last.py                     # HARNet (UCI-HAR) and bn_cnn_mnist (Fashion-MNIST)
    python benchmarks/channels_last.py --device cuda       # the same on a GPU
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from fedaug.models import build_model
from machine import (  # benchmarks/ is the script's directory
    add_device_argument,
    benchmark_device,
    clock,
    machine_facts,
    write_report,
)

REPO = Path(__file__).resolve().parents[1]
MODELS = {"harnet": ((1, 128, 3), 6, 2947), "bn_cnn_mnist": ((1, 28, 28), 10, 10000)}
FORMATS = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}


def train_step_s(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int) -> float:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    times = []
    for _ in range(steps):
        start = clock(x.device)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        times.append(clock(x.device) - start)
    return statistics.median(times)


@torch.inference_mode()
def eval_s(model: torch.nn.Module, x: torch.Tensor) -> float:
    model.eval()
    start = clock(x.device)
    for i in range(0, x.shape[0], 1024):
        model(x[i : i + 1024])
    return clock(x.device) - start


def bench(name: str, repeats: int, steps: int, device: torch.device) -> dict[str, Any]:
    shape, classes, test_size = MODELS[name]
    gen = torch.Generator().manual_seed(0)  # inputs and weights made on the CPU, then moved to the device
    x, y = torch.randn(32, *shape, generator=gen), torch.arange(32) % classes
    test_x = torch.randn(test_size, *shape, generator=gen)
    x, y, test_x = x.to(device), y.to(device), test_x.to(device)
    torch.manual_seed(0)
    base = build_model(name, num_classes=classes, input_shape=shape)
    models = {}
    for fmt, memory_format in FORMATS.items():
        model = build_model(name, num_classes=classes, input_shape=shape)
        model.load_state_dict(base.state_dict())
        models[fmt] = model.to(device).to(memory_format=memory_format)  # type: ignore[call-overload]
    inputs = {fmt: (x, test_x) for fmt in FORMATS}  # inputs stay NCHW, as in the engine
    for fmt in FORMATS:  # warm-up
        train_step_s(models[fmt], inputs[fmt][0], y, 3)
        eval_s(models[fmt], inputs[fmt][1])
    step: dict[str, list[float]] = {f: [] for f in FORMATS}
    ev: dict[str, list[float]] = {f: [] for f in FORMATS}
    for _ in range(repeats):
        for fmt in FORMATS:
            step[fmt].append(train_step_s(models[fmt], inputs[fmt][0], y, steps))
            ev[fmt].append(eval_s(models[fmt], inputs[fmt][1]))
    med = {f: statistics.median(v) for f, v in step.items()}
    med_eval = {f: statistics.median(v) for f, v in ev.items()}
    return {
        "input_shape": list(shape),
        "step_ms": {f: 1000 * v for f, v in med.items()},
        "eval_s": med_eval,
        "speedup_step": med["contiguous"] / med["channels_last"],
        "speedup_eval": med_eval["contiguous"] / med_eval["channels_last"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "channels_last.json"))
    add_device_argument(parser)
    args = parser.parse_args()
    device = benchmark_device(args.device)
    torch.set_num_threads(args.threads)
    result = {
        "threads": torch.get_num_threads(),
        "note": "medians of interleaved repeats in one process; the machine may be shared (see loadavg)",
        **machine_facts(device),
        "models": {name: bench(name, args.repeats, args.steps, device) for name in args.models},
    }
    write_report(args.out, result, echo=True)


if __name__ == "__main__":
    main()
