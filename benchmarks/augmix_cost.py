"""What AugMix and the JS loss cost per local step, next to a plain FedAvg step (one process, interleaved).

Three timings per repeat, interleaved so that load from other processes hits all equally, medians reported:

* ``fedavg_step``: one :func:`fedaug.training.loop.train_local` step (one epoch over one batch) with CE;
* ``augmix_views``: drawing and applying AugMix (two views per image, width 3, depth 1-3) to the batch;
* ``fedaugmix_step``: the same ``train_local`` step through ``FedAugMix``'s hooks (AugMix views, CE on the
  originals, one more forward pass for the views, JS, loss scaling).

Usage::

    python benchmarks/augmix_cost.py                                                    # MNIST LeNet-5 shapes
    python benchmarks/augmix_cost.py --model resnet18_cifar --shape 3 32 32 --repeats 5   # CIFAR shapes
    python benchmarks/augmix_cost.py --device cuda                                      # on a GPU
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable

import torch

from fedaug.api import ClientData, RunContext, TrainSettings
from fedaug.methods.fedaugmix import FedAugMixConfig, augmix_for, augmix_views_transform, js_consistency_loss
from fedaug.models import build_model
from fedaug.training.loop import cross_entropy_loss, train_local
from machine import (  # benchmarks/ is the script's directory
    add_device_argument,
    benchmark_device,
    clock,
    machine_facts,
    write_report,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="lenet5")
    parser.add_argument("--shape", type=int, nargs=3, default=[1, 28, 28])
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--severity", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", help="JSON file for the results")
    add_device_argument(parser)
    args = parser.parse_args()
    device = benchmark_device(args.device)
    torch.set_num_threads(args.threads)
    shape = tuple(args.shape)
    gen = torch.Generator().manual_seed(0)  # on the CPU: the same draws on every device
    x, y = torch.randn(args.batch, *shape, generator=gen), torch.arange(args.batch) % args.classes
    data = ClientData(0, x.to(device), y.to(device), args.classes)
    model = build_model(args.model, num_classes=args.classes, input_shape=shape).to(device)
    settings = TrainSettings(local_epochs=1, batch_size=args.batch)
    config = FedAugMixConfig(severity=args.severity)
    mean, std = (0.5,) * shape[0], (0.25,) * shape[0]
    run = RunContext(1, args.classes, shape, 0, 1, input_mean=mean, input_std=std, device=device)
    augmix = augmix_for(config, run)
    transform = augmix_views_transform(augmix)
    loss = js_consistency_loss(cross_entropy_loss, config)
    cases: dict[str, Callable[[], object]] = {
        "fedavg_step": lambda: train_local(
            model, data, loss_fn=cross_entropy_loss, settings=settings, generator=gen
        ),
        "augmix_views": lambda: augmix.views(data.x, gen),
        "fedaugmix_step": lambda: train_local(
            model, data, loss_fn=loss, settings=settings, generator=gen, batch_transform=transform
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for repeat in range(args.repeats + 1):
        for name, fn in cases.items():
            tick = clock(device)
            fn()
            if repeat > 0:  # the first round warms up
                times[name].append(clock(device) - tick)
    result = {name: statistics.median(t) * 1000 for name, t in times.items()}
    report = {
        "model": args.model,
        "shape": list(shape),
        "batch": args.batch,
        "severity": args.severity,
        "threads": args.threads,
        "repeats": args.repeats,
        "median_ms": result,
        "augmix_share_of_fedaugmix_step": result["augmix_views"] / result["fedaugmix_step"],
        "fedaugmix_over_fedavg": result["fedaugmix_step"] / result["fedavg_step"],
        **machine_facts(device),
    }
    if args.out:
        write_report(args.out, report, echo=True)
    else:
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
