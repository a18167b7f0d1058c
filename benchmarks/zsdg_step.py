"""ZSDG (Fed-ZDA's zero-shot data generation) per Adam step: batch statistics and memory format, side by side.

Fed-ZDAC/ZDAS spend nearly all of a round in ZSDG (10 models x 500 Adam steps on a 100-sample batch per
round), so its step is what a Fed-ZDA run costs. This times :func:`fedaug.methods.fedzda.zsdg.generate` in
four
variants, alternating in interleaved repeats in one process and one thread so that load from other processes
hits all of them:

* ``var``: the BN hooks' batch variance by ``Tensor.var`` (the code before the two-pass form), model in the
  default (NCHW) format;
* ``two_pass``: :func:`fedaug.methods.fedzda.zsdg.plain_batch_stats` (mean, then mean of squared
  deviations), NCHW;
* ``two_pass_channels_last``: the same on a channels-last copy of the model
  (:func:`fedaug.methods.fedzda.zsdg.channels_last_copy`): the code before the CPU backward;
* ``cpu_backward_channels_last``: :func:`fedaug.methods.fedzda.zsdg.batch_stats` (the same values and
  gradients with fewer full-size ops on a CPU), channels-last: what ``generate`` does.

Models: ``bn_cnn_mnist`` (Fed-ZDA's CNN, 28x28, 10 classes x 10 samples), ``bn_cnn_cifar`` (its CIFAR-10
CNN, 32x32x3, 10 x 10) and ``harnet`` (UCI-HAR, 6 x 10),
randomly initialised with running statistics from a few train-mode batches of Gaussian inputs (the step's
cost does not depend on the weights' values). Also reports, per variant, the largest difference of the
generated inputs from the ``var`` variant's after the timed steps (float rounding, amplified by the
optimisation), and whether they equal ``two_pass_channels_last``'s bit for bit. Writes JSON.

Usage::

    python benchmarks/zsdg_step.py
    python benchmarks/zsdg_step.py --device cuda --out /tmp/zsdg_step_cuda.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import fedaug.methods.fedzda.zsdg as zsdg
from fedaug.models import build_model
from machine import (  # benchmarks/ is the script's directory
    add_device_argument,
    benchmark_device,
    clock,
    machine_facts,
    write_report,
)

REPO = Path(__file__).resolve().parents[1]
MODELS = {
    "bn_cnn_mnist": ((1, 28, 28), 10),
    "bn_cnn_cifar": ((3, 32, 32), 10),
    "harnet": ((1, 128, 3), 6),
}
PER_CLASS = 10


def var_stats(x: Tensor) -> tuple[Tensor, Tensor]:
    """The batch statistics as computed before the two-pass form."""
    dims = [0, *range(2, x.dim())]
    return x.mean(dim=dims), x.var(dim=dims, unbiased=False)


def same_model(model: nn.Module) -> nn.Module:
    """Stands in for :func:`fedaug.methods.fedzda.zsdg.channels_last_copy`: the model as it is (NCHW)."""
    return model


@contextmanager
def patched(
    stats: Callable[[Tensor], tuple[Tensor, Tensor]], layout: Callable[[nn.Module], nn.Module]
) -> Iterator[None]:
    saved = zsdg.batch_stats, zsdg.channels_last_copy
    zsdg.batch_stats, zsdg.channels_last_copy = stats, layout  # type: ignore[assignment]
    try:
        yield
    finally:
        zsdg.batch_stats, zsdg.channels_last_copy = saved


def model_with_stats(name: str, device: torch.device) -> nn.Module:
    """The model on ``device`` (weights and inputs drawn on the CPU), BN statistics from 5 batches."""
    shape, classes = MODELS[name]
    torch.manual_seed(0)
    model = build_model(name, num_classes=classes, input_shape=shape).to(device)
    model.train()
    with torch.no_grad():
        for _ in range(5):
            model((torch.randn(64, *shape) * 2 + 0.5).to(device))
    return model


def bench(name: str, repeats: int, steps: int, device: torch.device) -> dict[str, Any]:
    shape, classes = MODELS[name]
    model = model_with_stats(name, device)
    variants = {
        "var": (var_stats, same_model),
        "two_pass": (zsdg.plain_batch_stats, same_model),
        "two_pass_channels_last": (zsdg.plain_batch_stats, zsdg.channels_last_copy),
        "cpu_backward_channels_last": (zsdg.batch_stats, zsdg.channels_last_copy),  # what generate does
    }
    settings = zsdg.ZSDGSettings(iterations=steps)
    times: dict[str, list[float]] = {key: [] for key in variants}
    outputs: dict[str, Tensor] = {}
    for _ in range(repeats):
        for key, (stats, layout) in variants.items():
            with patched(stats, layout):
                start = clock(device)
                out = zsdg.generate(
                    model,
                    classes=range(classes),
                    per_class=PER_CLASS,
                    input_shape=shape,
                    generator=torch.Generator().manual_seed(0),
                    settings=settings,
                )
                times[key].append((clock(device) - start) / steps)
            outputs[key] = out.x
    ms = {key: 1000 * statistics.median(values) for key, values in times.items()}
    return {
        "batch": classes * PER_CLASS,
        "input_shape": list(shape),
        "ms_per_step": ms,
        "speedup_vs_var": {key: ms["var"] / value for key, value in ms.items()},
        "speedup_vs_two_pass_channels_last": {
            key: ms["two_pass_channels_last"] / value for key, value in ms.items()
        },
        "max_abs_diff_vs_var": {key: float((x - outputs["var"]).abs().max()) for key, x in outputs.items()},
        "equal_to_two_pass_channels_last": {
            key: torch.equal(x, outputs["two_pass_channels_last"]) for key, x in outputs.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="Adam steps per timed generation")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "zsdg_step.json")
    add_device_argument(parser)
    args = parser.parse_args()
    device = benchmark_device(args.device)
    torch.set_num_threads(1)
    result = {
        "threads": 1,
        "torch": torch.__version__,
        "note": "medians of interleaved repeats in one process; the machine may be shared (see loadavg)",
        **machine_facts(device),
        "models": {name: bench(name, args.repeats, args.steps, device) for name in MODELS},
    }
    write_report(args.out, result)
    print(json.dumps(result["models"], indent=2))


if __name__ == "__main__":
    main()
