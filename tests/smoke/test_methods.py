"""Every registered method runs 2 rounds on 3 synthetic clients (new methods get this test for free).

The clients' 8-dim blobs are shaped as 1 x 2 x 4 images and the model has a BatchNorm layer, so image-only
methods (Fed-AugMix) and BN-only ones (Fed-ZDAC/ZDAS) run here too. The same check runs on CUDA in
``tests/gpu/`` when a GPU is present.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fedaug import registry
from fedaug.device import resolve_device, tensor_devices
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.simulation import Simulation, SimulationSpec
from fedaug.models.base import FlattenPool, SplitModel
from tests.conftest import make_spec

IMAGE = (1, 2, 4)


def bn_model() -> SplitModel:
    """Flatten -> Linear -> BatchNorm -> ReLU -> Linear on 1 x 2 x 4 images."""
    block = nn.Sequential(nn.Flatten(), nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU())
    return SplitModel([block], FlattenPool(), nn.Linear(16, 3))


def image_spec(run_dir: Path, name: str, device: torch.device, rounds: int = 2) -> SimulationSpec:
    """A run of method ``name`` on the 1 x 2 x 4 image blobs and :func:`bn_model`, on ``device``."""
    spec = make_spec(run_dir, method=registry.get("method", name)(), rounds=rounds, per_round=3)
    return dataclasses.replace(
        spec,
        train_x=spec.train_x.view(-1, *IMAGE),
        test_x=spec.test_x.view(-1, *IMAGE),
        run=dataclasses.replace(
            spec.run, input_shape=IMAGE, input_mean=(0.0,), input_std=(1.0,), device=device
        ),
        model_fn=bn_model,
    )


def run_on_device(run_dir: Path, name: str, device: torch.device) -> dict[str, Any]:
    """Runs method ``name`` for 2 rounds on ``device`` through the engine's seam (``RunContext.device``) and
    checks that every tensor it keeps (server state, client states, workspace models, checkpoint) is there."""
    sim = Simulation(image_spec(run_dir, name, device))
    summary = sim.run()
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["round"] for r in records] == [1, 2]
    assert all(math.isfinite(r["train/loss"]) for r in records)
    assert 0.0 <= summary["best_acc"] <= 1.0
    ckpt = torch.load(run_dir / "ckpt" / "latest.pt", weights_only=True)  # tensors where they were saved from
    kept = {"checkpoint": ckpt, "client states": sim.client_states, "workspaces": sim._workspaces}
    for what, obj in kept.items():
        assert tensor_devices(obj) <= {device}, f"{name}: {what} on {tensor_devices(obj)}, not {device}"
    assert tensor_devices(ckpt["state"]["model_state"]) == {device}
    return summary


@pytest.mark.parametrize("name", registry.available("method"))
def test_method_runs_two_rounds_with_its_state_on_the_device(tmp_path: Path, name: str) -> None:
    run_on_device(tmp_path, name, resolve_device("cpu"))
