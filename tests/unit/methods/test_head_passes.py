"""Fused head passes (FLea's local head on f~, f and the buffer in one pass) equal separate passes in float64:
outputs, gradients, BatchNorm running statistics, and FLea's client updates over several steps."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from fedaug.api import Payload, TrainSettings
from fedaug.methods.flea.buffer import FLeaBuffer
from fedaug.methods.flea.head_passes import fusable, fused_passes, separate_passes
from fedaug.methods.flea.method import FLea, FLeaConfig, FLeaOfficial
from fedaug.models import build_model
from fedaug.models.base import FlattenPool, SplitModel
from tests.unit.methods.helpers import client_context, initial_state

HAR_SHAPE = (1, 64, 3)


def _harnet(seed: int = 0) -> SplitModel:
    torch.manual_seed(seed)
    return build_model("harnet", num_classes=6, input_shape=HAR_SHAPE).double()


def _passes_and_grads(
    model: SplitModel, parts: Sequence[torch.Tensor], layer: int, fused: bool
) -> tuple[list[torch.Tensor], dict[str, torch.Tensor], list[torch.Tensor]]:
    """Each part's logits, the state afterwards, and the gradients of a weighted sum of the logits with
    respect to the weights and to the parts."""
    parts = [p.clone().requires_grad_(True) for p in parts]
    outs = (fused_passes if fused else separate_passes)(model, parts, layer)
    loss = sum((i + 1) * (out * out.sin()).sum() for i, out in enumerate(outs))
    params = list(model.parameters())
    grads = torch.autograd.grad(loss, [*params, *parts], allow_unused=True)  # the encoder's are unused
    return outs, copy.deepcopy(model.state_dict()), [g for g in grads if g is not None]


def _assert_same(fused: object, separate: object) -> None:
    for a, b in zip(fused, separate, strict=True):  # type: ignore[call-overload]
        if isinstance(a, dict):
            assert a.keys() == b.keys()
            for key in a:
                torch.testing.assert_close(a[key], b[key], rtol=1e-12, atol=1e-12, msg=key)
        else:
            _assert_close_list(a, b)


def _assert_close_list(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for u, v in zip(a, b, strict=True):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)


@settings(max_examples=6, deadline=None)
@given(parts=st.integers(2, 3), batch=st.integers(2, 5), layer=st.sampled_from([-1, 0, 1, 2]))
def test_fused_passes_equal_separate_ones_through_batchnorm(parts: int, batch: int, layer: int) -> None:
    model = _harnet()
    model.train()
    gen = torch.Generator().manual_seed(parts * 10 + batch)
    x = torch.randn(batch, *HAR_SHAPE, generator=gen, dtype=torch.float64)
    features = model.encode(x, layer).detach()
    inputs = [
        features + torch.randn(features.shape, generator=gen, dtype=torch.float64) for _ in range(parts)
    ]
    separate = _passes_and_grads(copy.deepcopy(model), inputs, layer, fused=False)
    fused = _passes_and_grads(copy.deepcopy(model), inputs, layer, fused=True)
    _assert_same(fused, separate)
    # every training-mode BatchNorm of the head updated its running statistics once per part
    tracked = [v for k, v in fused[1].items() if k.endswith("num_batches_tracked")]
    assert [int(t) for t in tracked] == [1] * (layer + 1) + [parts] * (4 - layer - 1)


def test_a_single_batch_of_the_concatenation_would_differ() -> None:
    # why the per-part statistics: plain BatchNorm over the concatenated batch gives other logits
    model = _harnet()
    x = torch.randn(4, *HAR_SHAPE, dtype=torch.float64)
    parts = [model.encode(x, 1).detach(), model.encode(x, 1).detach().abs() + 1]
    plain = copy.deepcopy(model).decode(torch.cat(parts), 1)
    separate = separate_passes(copy.deepcopy(model), parts, 1)
    assert (plain - torch.cat(separate)).abs().max() > 1e-3


def test_cumulative_average_batchnorm_and_eval_mode() -> None:
    # momentum=None: a cumulative average, 1 / num_batches_tracked per part; eval mode: running statistics
    torch.manual_seed(1)
    block = nn.Sequential(nn.Linear(5, 7), nn.BatchNorm1d(7, momentum=None), nn.ReLU())
    model = SplitModel([nn.Identity(), block], FlattenPool(), nn.Linear(7, 3)).double()
    inputs = [torch.randn(4, 5, dtype=torch.float64) for _ in range(3)]
    _assert_same(
        _passes_and_grads(copy.deepcopy(model), inputs, 0, fused=True),
        _passes_and_grads(copy.deepcopy(model), inputs, 0, fused=False),
    )
    model.eval()
    _assert_same(
        _passes_and_grads(copy.deepcopy(model), inputs, 0, fused=True),
        _passes_and_grads(copy.deepcopy(model), inputs, 0, fused=False),
    )


def test_dropout_and_unequal_parts_are_not_fused() -> None:
    model = SplitModel([nn.Linear(4, 6), nn.Dropout(0.5)], FlattenPool(), nn.Linear(6, 2))
    a, b = torch.randn(3, 6), torch.randn(3, 6)
    assert not fusable(model, [a, b], 0)
    model.eval()  # inactive dropout
    assert fusable(model, [a, b], 0)
    assert not fusable(model, [a, b[:2]], 0)
    # the BatchNorm forwards are put back after a fused pass
    bn = _harnet()
    fused_passes(bn, [torch.zeros(2, 128, 13, 7, dtype=torch.float64)] * 2, 1)
    assert all("forward" not in vars(m) for m in bn.modules())


def _flea_update(
    method: FLea, head_passes: str, optimizer: str, device: torch.device | None = None
) -> tuple[dict[str, torch.Tensor], dict]:
    """Round 2 of a HARNet client in float64 with a non-empty buffer (on ``device``, default the CPU): the
    final weights and metrics."""
    method = copy.copy(method)
    method.head_passes = head_passes
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(16, *HAR_SHAPE, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 6, (16,), generator=gen)
    state = initial_state(_harnet)
    model = _harnet()
    model.load_state_dict(state)
    buffer = FLeaBuffer(model.encode(x[:9] * 0.5, 1).detach(), y[:9])
    device = device or torch.device("cpu")
    x, y, buffer = x.to(device), y.to(device), FLeaBuffer(buffer.x.to(device), buffer.y.to(device))
    state = {k: v.to(device) for k, v in state.items()}
    ctx = client_context(x, y, model_fn=lambda: _harnet().to(device), num_classes=6)
    train = TrainSettings(local_epochs=2, batch_size=8, lr=0.05, optimizer=optimizer, momentum=0.9)
    payload = Payload(round_num=2, model_state=state, train=train, extra=buffer.to_extra())
    update = method.client_update(payload, ctx)
    return update.model_state, update.metrics


@pytest.mark.parametrize(
    "method",
    [FLea(FLeaConfig()), FLeaOfficial(), FLea(FLeaConfig(local_ce_weight=0.0, distill_on="buffer"))],
    ids=["default", "official", "buffer-kl-only"],
)
def test_flea_client_update_fused_equals_separate_in_float64(method: FLea) -> None:
    # 2 epochs of 2 steps, SGD with momentum: every loss part and every weight to 1e-12 (relative: the last
    # BatchNorm running variances grow to tens, and differ by about 1e-14 relative)
    state, metrics = _flea_update(method, "fused", "sgd")
    ref_state, ref_metrics = _flea_update(method, "separate", "sgd")
    assert metrics.keys() == ref_metrics.keys()
    assert metrics["train/steps"] == 4.0
    for key, value in ref_metrics.items():
        assert metrics[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
    for key, value in ref_state.items():
        torch.testing.assert_close(state[key], value, rtol=1e-12, atol=1e-12, msg=key)
