"""Issue #52's CUDA checks: padded batched clients recorded as ONE CUDA graph equal the sequential loop in
float64, and FLea's fused head passes equal separate ones on the GPU.

Skipped without a GPU (``tests/gpu/conftest.py``); ``scripts/gpu_throughput.sh`` runs them first.
"""

from __future__ import annotations

import copy

import pytest
import torch

from fedaug.api import TrainSettings
from fedaug.engine.padded import PaddedStep
from fedaug.methods.flea import FLea, FLeaConfig, FLeaOfficial
from tests.unit.engine.helpers import bn_mlp_float64
from tests.unit.engine.test_padded import ADAM, SGD_MOMENTUM, _clients, _sequential
from tests.unit.methods.test_head_passes import _flea_update


def _on(clients: list, device: torch.device) -> list:
    for c in clients:
        c.data = type(c.data)(c.data.client_id, c.data.x.to(device), c.data.y.to(device), c.data.num_classes)
    return clients


@pytest.mark.parametrize("train", [ADAM, SGD_MOMENTUM], ids=["adam", "sgd-momentum"])
def test_padded_step_replayed_as_one_cuda_graph_equals_the_sequential_loop(train: TrainSettings) -> None:
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = bn_mlp_float64()
    sizes = [20, 13, 9, 3]
    expected = _sequential(model, _clients(sizes), train)  # on the CPU, float64
    clients = _on(_clients(sizes), device)
    gpu_model = copy.deepcopy(model).to(device)
    schedules = [list(c.batches(train)) for c in clients]
    step = PaddedStep(
        gpu_model, len(clients), max(x.shape[0] for s in schedules for x, _, _ in s), clients[0].data.x, train
    )
    # the recording takes the first step's inputs; a capture computes nothing, so state is restored after
    # the warm-up (which does compute)
    step.fill({c: (s[0][0], s[0][1]) for c, s in enumerate(schedules)})
    saved = [
        t.clone()
        for t in (
            step.params.rows,
            step.optimizer.first,
            step.optimizer.second,
            step.optimizer.steps,
            *step.rest.values(),
        )
    ]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step.run()
    torch.cuda.current_stream().wait_stream(stream)
    for t, s in zip(
        (
            step.params.rows,
            step.optimizer.first,
            step.optimizer.second,
            step.optimizer.steps,
            *step.rest.values(),
        ),
        saved,
        strict=True,
    ):
        t.copy_(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step.run()
    for t in range(max(map(len, schedules))):
        step.fill({c: (s[t][0], s[t][1]) for c, s in enumerate(schedules) if t < len(s)})
        graph.replay()
    stacked = {**step.params.views(step.params.rows), **step.rest}
    for c, ref in enumerate(expected):
        for key, value in model.state_dict().items():
            del value
            torch.testing.assert_close(stacked[key][c].cpu(), ref[key], rtol=1e-10, atol=1e-10, msg=key)


@pytest.mark.parametrize("method", [FLea(FLeaConfig()), FLeaOfficial()], ids=["default", "official"])
def test_flea_fused_head_passes_equal_separate_on_cuda(method: FLea) -> None:
    state, metrics = _flea_update(method, "fused", "sgd", device=torch.device("cuda"))
    ref_state, ref_metrics = _flea_update(method, "separate", "sgd", device=torch.device("cuda"))
    for key, value in ref_metrics.items():
        assert metrics[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
    for key, value in ref_state.items():
        torch.testing.assert_close(state[key], value, rtol=1e-12, atol=1e-12, msg=key)
