"""FLOPs of one training image of each CIFAR / HAR / audio model, counted two ways -> JSON.

:func:`fedaug.models.flops.count_flops` reads the convolution and linear shapes (forward ``2 x MACs``,
backward the weight and input gradients); ``torch.utils.flop_counter.FlopCounterMode`` counts the aten ops of
one forward + backward of the cross-entropy. They agree on dense models; on MobileNetV2 FlopCounterMode counts
each depthwise weight gradient as if the convolution were dense. Nothing is timed.

Usage::

    python benchmarks/flops.py          # -> benchmarks/results/flops_per_image.json
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from fedaug.models import build_model
from fedaug.models.flops import count_flops
from machine import write_report  # benchmarks/ is the script's directory

RESULTS = Path(__file__).resolve().parent / "results"
MODELS: dict[str, tuple[tuple[int, ...], int]] = {
    "harnet": ((1, 128, 3), 6),
    "audionet": ((2, 64, 344), 10),
    "bn_cnn_cifar": ((3, 32, 32), 10),
    "lenet5": ((3, 32, 32), 10),
    "mobilenet_v2_cifar": ((3, 32, 32), 10),
    "resnet18_cifar": ((3, 32, 32), 10),
}
"""Input shape and classes of each model (lenet5: the 3-channel CIFAR-10 stand-in)."""


def flop_counter_mode(model: torch.nn.Module, shape: tuple[int, ...], classes: int) -> float:
    """FlopCounterMode's forward + backward FLOPs per image (batch 2)."""
    x, y = torch.randn(2, *shape), torch.arange(2) % classes
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(x), y).backward()  # type: ignore[no-untyped-call]
    return counter.get_total_flops() / 2


def row(name: str) -> dict[str, Any]:
    shape, classes = MODELS[name]
    torch.manual_seed(0)
    model = build_model(name, num_classes=classes, input_shape=shape)
    flops = count_flops(model, shape)
    return {
        "input_shape": list(shape),
        "gflop_forward": flops.forward / 1e9,
        "gflop_train": flops.train / 1e9,
        "gflop_train_flop_counter_mode": flop_counter_mode(model, shape, classes) / 1e9,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(RESULTS / "flops_per_image.json"))
    args = parser.parse_args()
    report = {
        "convention": "forward 2 x MACs of convs and linears; backward weight + input gradients "
        "(no input gradient where the input needs none); batch norm, activations, pooling, loss not counted",
        "models": {name: row(name) for name in MODELS},
    }
    write_report(args.out, report)


if __name__ == "__main__":
    main()
