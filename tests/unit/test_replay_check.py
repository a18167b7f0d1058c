"""The CPU stand-in for CUDA graph capture (tests/unit/replay_check.py) must catch every hook a GPU would
replay wrongly or fail to record, and pass the hooks fedaug's methods use."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
import torch
from torch import Tensor, nn

from fedaug.api import ClientData
from fedaug.training import step_graphs
from fedaug.training.loop import BatchableLoss, ClientTensors, LossOutput, cross_entropy_loss
from tests.unit.replay_check import ReplayMismatch, record_on_cpu
from tests.unit.test_step_graphs import SETTINGS, _assert_same, _fresh_model, _loss_with_state, _train

Objective = Callable[[nn.Module, Tensor, Tensor, ClientTensors, ClientTensors], LossOutput]


def test_hooks_that_replay_correctly_pass_and_get_the_captures_outputs_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    eager = _train(_fresh_model(), _loss_with_state(False), replace(SETTINGS, cuda_graphs=False))
    replays: list[int] = []
    record_on_cpu(monkeypatch, replays)
    model = _fresh_model()
    _assert_same(eager, _train(model, _loss_with_state(False), SETTINGS))
    counts = step_graphs._GRAPHS[model].counts
    # recorded once a round per shape (2 rounds x 4 shapes), every step a checked replay
    assert counts == {"captured": 8, "replayed": 36, "eager": 0}
    assert len(replays) == 8 and sum(replays) == 36


def _ce(model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    return cross_entropy_loss(model, x, y).loss


def _counting() -> Objective:
    calls = [0]

    def fn(model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors) -> LossOutput:
        calls[0] += 1  # Python state: a replay keeps the capture's weight
        return LossOutput(_ce(model, x, y) * (1 + calls[0] % 2), {})

    return fn


def _rebinding() -> Objective:
    held = {"total": torch.zeros((), dtype=torch.float64)}

    def fn(model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors) -> LossOutput:
        loss = _ce(model, x, y)
        held["total"] = held["total"] + loss.detach()  # a new tensor each step: a replay reads the first
        return LossOutput(loss + 0 * held["total"], {})

    return fn


def _host_read(
    model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
) -> LossOutput:
    loss = _ce(model, x, y)
    return LossOutput(loss if loss.item() < 1e6 else loss * 0, {})


def _host_value(
    model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
) -> LossOutput:
    return LossOutput(_ce(model, x, y) * torch.tensor(0.5, dtype=torch.float64), {})


def _device_draw(
    model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
) -> LossOutput:
    return LossOutput(_ce(model, x * torch.rand_like(x), y), {})


def _value_shaped(
    model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
) -> LossOutput:
    logits = model(x)
    return LossOutput(logits.masked_select(y[:, None] == 0).sum() + _ce(model, x, y), {})


def _mask_indexed(
    model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
) -> LossOutput:
    logits = model(x)  # indexing with a boolean mask is value-shaped; with integers (FLea's buffer) it is not
    return LossOutput(logits[y == 0].sum() + logits[y.argsort()].sum() + _ce(model, x, y), {})


BAD_HOOKS: list[tuple[Callable[[], Objective], str]] = [
    (_counting, r"a replay would not compute the eager step: operation \d+: captured \('aten.mul.Tensor'"),
    (_rebinding, r"a replay would not compute the eager step: operation \d+: captured \('aten.add.Tensor'"),
    (lambda: _host_read, r"aten._local_scalar_dense.default reads a device value on the host"),
    (lambda: _host_value, r"aten.lift_fresh.default: a tensor made from host values inside the step"),
    (lambda: _device_draw, r"aten.rand_like.default draws random numbers inside the step"),
    (lambda: _value_shaped, r"aten.masked_select.default its output's shape depends on values"),
    (lambda: _mask_indexed, r"aten.index.Tensor its output's shape depends on values"),
]


@pytest.mark.parametrize(("make", "message"), BAD_HOOKS)
def test_hooks_a_gpu_would_replay_wrongly_or_not_record_fail_the_check(
    monkeypatch: pytest.MonkeyPatch, make: Callable[[], Objective], message: str
) -> None:
    fn = make()  # one hook object for every client, as FedAvg's cross-entropy

    def loss_for(data: ClientData) -> BatchableLoss:
        return BatchableLoss(fn)

    record_on_cpu(monkeypatch, [])
    with pytest.raises(ReplayMismatch, match=message):
        _train(_fresh_model(), loss_for, SETTINGS)
