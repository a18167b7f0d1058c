"""How much Fed-AugMix changes a client's update: cosine similarity and norm ratio to the plain FedAvg update.

The victim of ``fedaug attack invert`` (same 4 MNIST images, seed 0, 5 SGD steps at lr 1e-4), run once as
FedAvg and once as Fed-AugMix at each severity with loss scaling on and off; writes
studies/fedaugmix/update_similarity.json. A cosine near 1 means the update an attacker sees is almost
the undefended one.

    FEDAUG_DATA=../shared/data python studies/fedaugmix/update_similarity.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from fedaug.api import RunContext
from fedaug.attacks import invert as inv
from fedaug.data.datasets import load_dataset
from fedaug.models import build_model
from fedaug.models.base import SplitModel
from fedaug.runtime.seeding import torch_generator

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT = ROOT / "runs/fedaugmix_mnist_cpu/mnist-dirichlet0.5-K100/fedavg/seed0/ckpt/latest.pt"
JS = {"js_lambda": 12.0, "scaled_lambda": 100.0, "scaling_kappa": 50.0}


def main() -> None:
    torch.set_num_threads(1)
    ds = load_dataset("mnist")
    idx = torch.randperm(ds.num_train, generator=torch_generator(0, "attack-images", 0))[:4]
    x, y = ds.x_train[idx], ds.y_train[idx]
    shape = tuple(ds.input_shape)
    run = RunContext(
        num_clients=1,
        num_classes=10,
        input_shape=shape,
        seed=0,
        num_rounds=1,
        input_mean=ds.mean,
        input_std=ds.std,
    )
    rows: list[dict[str, Any]] = []
    for model_name, stages in (("mlp", ["untrained"]), ("lenet5", ["untrained", "converged"])):

        def model_fn(name: str = model_name) -> SplitModel:
            return build_model(name, num_classes=10, input_shape=shape)

        for stage in stages:
            state = inv.global_state(stage, model_fn, 0, CHECKPOINT)

            def update(setting: inv.Setting, stage: str = stage, state: Any = state) -> torch.Tensor:
                gen = torch_generator(0, "victim", stage, 0, setting.label)
                delta = inv.victim_update(
                    inv.victim_method(setting, JS), model_fn(), state, x, y, run,
                    generator=gen, local_epochs=5, client_lr=1e-4,
                )  # fmt: skip
                return torch.cat([v.flatten() for v in delta.values()])

            base = update(inv.Setting(stage, 0.0, "none", False))
            for severity in (3.0, 10.0):
                for scaling in (True, False):
                    u = update(inv.Setting(stage, severity, "ce", scaling))
                    row = {
                        "model": model_name,
                        "stage": stage,
                        "severity": severity,
                        "loss_scaling": scaling,
                        "cos_to_fedavg_update": float(torch.nn.functional.cosine_similarity(u, base, dim=0)),
                        "norm_ratio": float(u.norm() / base.norm()),
                    }
                    print(row)
                    rows.append(row)
    (Path(__file__).parent / "update_similarity.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
