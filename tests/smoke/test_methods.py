"""Every registered method runs 2 rounds on 3 synthetic clients (new methods get this test for free).

The clients' 8-dim blobs are shaped as 1 x 2 x 4 images and the model has a BatchNorm layer, so image-only
methods (Fed-AugMix) and BN-only ones (Fed-ZDAC/ZDAS) run here too.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from torch import nn

from fedaug import registry
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.simulation import Simulation
from fedaug.models.base import FlattenPool, SplitModel
from tests.conftest import make_spec

IMAGE = (1, 2, 4)


def bn_model() -> SplitModel:
    """Flatten -> Linear -> BatchNorm -> ReLU -> Linear on 1 x 2 x 4 images."""
    block = nn.Sequential(nn.Flatten(), nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU())
    return SplitModel([block], FlattenPool(), nn.Linear(16, 3))


@pytest.mark.parametrize("name", registry.available("method"))
def test_method_runs_two_rounds(tmp_path: Path, name: str) -> None:
    method = registry.get("method", name)()
    spec = make_spec(tmp_path, method=method, rounds=2, per_round=3)
    spec = dataclasses.replace(
        spec,
        train_x=spec.train_x.view(-1, *IMAGE),
        test_x=spec.test_x.view(-1, *IMAGE),
        run=dataclasses.replace(spec.run, input_shape=IMAGE, input_mean=(0.0,), input_std=(1.0,)),
        model_fn=bn_model,
    )
    summary = Simulation(spec).run()
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["round"] for r in records] == [1, 2]
    assert all(math.isfinite(r["train/loss"]) for r in records)
    assert 0.0 <= summary["best_acc"] <= 1.0
    assert (tmp_path / "ckpt" / "latest.pt").exists()
