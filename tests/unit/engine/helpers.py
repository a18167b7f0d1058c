"""Helpers shared by the batched-clients tests (``test_batched``, ``test_batched_more``): a float64 run whose
clients differ in size, and the check that a batched run equals the sequential one."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fedaug.engine.checkpoint import read_jsonl
from fedaug.methods.fedavg import FedAvg
from fedaug.models.base import FlattenPool, SplitModel
from tests.conftest import make_spec


def bn_mlp_float64() -> SplitModel:
    """Linear -> BatchNorm -> ReLU -> Linear on the 8-dim blobs, in float64."""
    # No bias before the BN layer: its true gradient is zero and Adam would amplify rounding noise in it.
    block = nn.Sequential(nn.Linear(8, 16, bias=False), nn.BatchNorm1d(16), nn.ReLU())
    return SplitModel([block], FlattenPool(), nn.Linear(16, 3)).double()


def unequal_float64_spec(run_dir: Path, method: FedAvg) -> Any:
    """The conftest simulation in float64 with :func:`bn_mlp_float64` and clients of unequal sizes."""
    # Clients of 20, 13 and 9 samples: batches (8, 8, 4), (8, 5) and (9,) per epoch, so at every step some
    # clients are stacked together, some take a batch of another shape alone and some have finished.
    spec = make_spec(
        run_dir, method=method, rounds=3, per_round=3, samples_per_client=20, model_fn=bn_mlp_float64
    )
    sizes = [20, 13, 9]
    indices = [torch.arange(c, 60, 3)[:n] for c, n in enumerate(sizes)]
    run = replace(spec.run, client_sizes=tuple(sizes))
    return replace(
        spec, train_x=spec.train_x.double(), test_x=spec.test_x.double(), client_indices=indices, run=run
    )


def assert_same_run(seq_dir: Path, bat_dir: Path) -> None:
    """The batched run in ``bat_dir`` equals the sequential one in ``seq_dir``: the same steps, train metrics
    and test accuracy to 1e-9, test loss to 1e-6 and final weights to 1e-10 (float64 runs)."""
    seq = read_jsonl(seq_dir / "metrics.jsonl")
    bat = read_jsonl(bat_dir / "metrics.jsonl")
    assert [r["train/steps"] for r in bat] == [r["train/steps"] for r in seq]
    for s, b in zip(seq, bat, strict=True):
        assert s.keys() == b.keys()
        for key in s:
            if key.startswith(("train/", "test/acc")):
                assert b[key] == pytest.approx(s[key], rel=1e-9, abs=1e-9), key
        # Evaluation casts the logits to float32: a 1e-16 difference can round to the next float32.
        assert b["test/loss"] == pytest.approx(s["test/loss"], rel=1e-6)
    seq_state = torch.load(seq_dir / "ckpt" / "latest.pt", weights_only=True)["state"]
    bat_state = torch.load(bat_dir / "ckpt" / "latest.pt", weights_only=True)["state"]
    for key, value in seq_state["model_state"].items():
        torch.testing.assert_close(bat_state["model_state"][key], value, rtol=0, atol=1e-10)
