"""Issue #52's CUDA checks: padded batched clients recorded as ONE CUDA graph equal the sequential loop in
float64 (the trainer alone, and whole engine runs with ``engine.batched_clients=padded`` and graphs), and
FLea's fused head passes equal separate ones on the GPU.

Skipped without a GPU (``tests/gpu/conftest.py``); ``scripts/gpu_throughput.sh`` runs them first.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from fedaug.api import TrainSettings
from fedaug.engine.batched import padded
from fedaug.engine.batched.padded import train_clients_padded
from fedaug.engine.simulation import Simulation
from fedaug.methods.flea.method import FLea, FLeaConfig, FLeaOfficial
from tests.unit.engine.helpers import assert_same_run, bn_mlp_float64
from tests.unit.engine.test_padded import ADAM, SGD_MOMENTUM, _clients, _sequential
from tests.unit.engine.test_padded_methods import COVERED, _spec
from tests.unit.methods.test_head_passes import _flea_update


def _on(clients: list, device: torch.device) -> list:
    for c in clients:
        c.data = type(c.data)(c.data.client_id, c.data.x.to(device), c.data.y.to(device), c.data.num_classes)
    return clients


@pytest.mark.parametrize("train", [ADAM, SGD_MOMENTUM], ids=["adam", "sgd-momentum"])
def test_padded_clients_recorded_as_one_cuda_graph_equal_the_sequential_loop(train: TrainSettings) -> None:
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = bn_mlp_float64()
    sizes = [20, 13, 9, 3]
    expected = _sequential(model, _clients(sizes), train)  # on the CPU, float64
    gpu_model = copy.deepcopy(model).to(device)
    states, metrics = train_clients_padded(
        gpu_model, _on(_clients(sizes), device), replace(train, cuda_graphs=True)
    )
    steps = padded._STEPS[gpu_model].values()
    assert steps and all(isinstance(s.graph, torch.cuda.CUDAGraph) for s in steps)  # recorded, not eager
    for state, metric, ref in zip(states, metrics, expected, strict=True):
        assert metric["train/steps"] == float(ref["steps"])
        for key, value in state.items():
            torch.testing.assert_close(value.cpu(), ref[key], rtol=1e-10, atol=1e-10, msg=key)


@pytest.mark.parametrize("name", ["fedavg", "fedprox", "flea", "moon"])
def test_a_padded_run_with_graphs_on_cuda_equals_the_sequential_cpu_run(tmp_path: Path, name: str) -> None:
    # the wired path: engine.batched_clients=padded with engine.cuda_graphs, three float64 rounds of clients
    # of 20, 13, 9 and 3 samples, against the sequential loop on the CPU
    method = COVERED[name]
    Simulation(_spec(tmp_path / "seq", method())).run()
    spec = _spec(tmp_path / "pad", method(), mode="padded")
    on_gpu = replace(spec, run=replace(spec.run, device=torch.device("cuda")), cuda_graphs=True)
    sim = Simulation(on_gpu)
    sim.run()
    steps = padded._STEPS[sim.workspace("client")].values()
    assert steps and all(isinstance(s.graph, torch.cuda.CUDAGraph) for s in steps)
    assert_same_run(tmp_path / "seq", tmp_path / "pad")


@pytest.mark.parametrize("method", [FLea(FLeaConfig()), FLeaOfficial()], ids=["default", "official"])
def test_flea_fused_head_passes_equal_separate_on_cuda(method: FLea) -> None:
    state, metrics = _flea_update(method, "fused", "sgd", device=torch.device("cuda"))
    ref_state, ref_metrics = _flea_update(method, "separate", "sgd", device=torch.device("cuda"))
    for key, value in ref_metrics.items():
        assert metrics[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
    for key, value in ref_state.items():
        torch.testing.assert_close(state[key], value, rtol=1e-12, atol=1e-12, msg=key)
