"""Prints the L2 norms (10th, 50th, 90th percentile) of 2,000 training rows as the study shares them, through
the untrained model (seed 0): the inputs (FedMix's clip) and the activations at split layers 1 and 2 (FLea's),
on Fashion-MNIST (LeNet-5) and UCI-HAR (HARNet). The clips of make_steps.py are about the medians, fixed
before any run (choosing them on trained models' private activations would itself spend privacy).

Run from the repository root: python studies/privacy_dp/clip_norms.py [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse

import torch

from fedaug.data.datasets import load_dataset
from fedaug.models import build_model

SETTINGS = (("fashion_mnist", "lenet5"), ("uci_har", "harnet"))


def quantiles(rows: torch.Tensor) -> list[float]:
    norms = rows.flatten(1).norm(dim=1)
    return [round(float(v), 2) for v in torch.quantile(norms, torch.tensor([0.1, 0.5, 0.9]))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    args = parser.parse_args()
    for data_name, model_name in SETTINGS:
        dataset = load_dataset(data_name, data_dir=args.data_dir)
        x = dataset.x_train[:2000]
        torch.manual_seed(0)
        model = build_model(
            model_name, num_classes=dataset.num_classes, input_shape=tuple(dataset.input_shape)
        )
        model.eval()
        print(f"{data_name} inputs: L2 norm quantiles 10/50/90% {quantiles(x)}")
        with torch.no_grad():
            for layer in (1, 2):
                print(f"{data_name} {model_name} layer {layer}: {quantiles(model.encode(x, layer))}")


if __name__ == "__main__":
    main()
