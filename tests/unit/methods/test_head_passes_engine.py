"""FLea's fused head passes (the GPU's default) through the engine's other paths on the CPU: batched clients
(vmap) equal the sequential loop in float64, and recorded steps take the GPU's capture-and-replay path and
equal eager steps bit for bit. The head holds a BatchNorm (split layer -1), so the per-part statistics run
inside vmap and inside the checked capture."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.simulation import Simulation
from fedaug.methods.flea.method import FLea, FLeaConfig
from tests.helpers import image_spec
from tests.unit.engine.helpers import unequal_float64_spec
from tests.unit.engine.test_batched_more import _assert_batched_equals_sequential
from tests.unit.replay_check import record_on_cpu


def test_fused_flea_batched_equals_the_sequential_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FLea, "head_passes", "fused")
    method = FLea(FLeaConfig(split_layer=-1, share_fraction=0.5))
    _assert_batched_equals_sequential(tmp_path, monkeypatch, method, unequal_float64_spec)


def test_fused_flea_steps_replay_as_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FLea, "head_passes", "fused")
    runs = {}
    replays: list[int] = []
    for graphs in (False, True):
        if graphs:
            record_on_cpu(monkeypatch, replays)
        spec = image_spec(tmp_path / str(graphs), "flea", torch.device("cpu"), rounds=3)
        method = FLea(FLeaConfig(split_layer=-1, share_fraction=0.5))
        Simulation(dataclasses.replace(spec, method=method, cuda_graphs=graphs)).run()
        metrics = [
            {k: v for k, v in r.items() if k != "time"}
            for r in read_jsonl(tmp_path / str(graphs) / "metrics.jsonl")
        ]
        state = torch.load(tmp_path / str(graphs) / "ckpt" / "latest.pt", weights_only=True)["state"][
            "model_state"
        ]
        runs[graphs] = (metrics, state)
    assert runs[True][0] == runs[False][0]
    for key, value in runs[False][1].items():
        assert torch.equal(runs[True][1][key], value), key
    assert replays and sum(replays) > 0  # the GPU's path ran: captured steps replayed and checked
