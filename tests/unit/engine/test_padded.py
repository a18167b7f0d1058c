"""Padded batched clients (static shapes, for one CUDA graph): equal to the sequential loop in float64,
BatchNorm over each client's real samples; each step one call of the same shapes; unmasked losses refused."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from fedaug.api import ClientContext, ClientData, RunContext, TrainSettings
from fedaug.engine.batched import padded
from fedaug.engine.batched.padded import PaddedBatches, PaddedStep, masked_batchnorm, train_clients_padded
from fedaug.engine.batched.stacked import _Client
from fedaug.errors import ConfigError
from fedaug.models.base import FlattenPool, SplitModel
from fedaug.training.loop import BatchableLoss, LossOutput, as_batchable, cross_entropy_loss, train_local
from fedaug.training.row_mask import mean_cross_entropy
from tests.unit.engine.helpers import bn_mlp_float64

RUN = RunContext(num_clients=3, num_classes=3, input_shape=(8,), seed=0, num_rounds=1)
ADAM = TrainSettings(local_epochs=2, batch_size=8, lr=1e-2, optimizer="adam", weight_decay=1e-3)
SGD_MOMENTUM = TrainSettings(local_epochs=2, batch_size=8, lr=5e-2, optimizer="sgd", momentum=0.9)
SGD = TrainSettings(local_epochs=1, batch_size=4, lr=5e-2, optimizer="sgd")


def _clients(sizes: list[int]) -> list[_Client]:
    clients = []
    for cid, size in enumerate(sizes):
        gen = torch.Generator().manual_seed(50 + cid)
        y = torch.randint(0, 3, (size,), generator=gen)
        x = torch.randn(size, 8, generator=gen, dtype=torch.float64) + y.view(-1, 1)
        data = ClientData(cid, x, y, 3)
        ctx = ClientContext(cid, 1, data, None, torch.Generator().manual_seed(cid), RUN)  # type: ignore[arg-type]
        loss = as_batchable(cross_entropy_loss)
        assert loss is not None
        clients.append(_Client(ctx, data, loss, None))
    return clients


def _sequential(
    model: nn.Module, clients: list[_Client], train: TrainSettings
) -> list[dict[str, torch.Tensor]]:
    states = []
    for c in clients:
        local = copy.deepcopy(model)
        gen = torch.Generator().manual_seed(c.ctx.client_id)
        metrics = train_local(local, c.data, loss_fn=cross_entropy_loss, settings=train, generator=gen)
        states.append({**local.state_dict(), "steps": torch.tensor(metrics["train/steps"])})
    return states


@pytest.mark.parametrize("train", [ADAM, SGD_MOMENTUM, SGD], ids=["adam", "sgd-momentum", "sgd"])
def test_padded_clients_equal_the_sequential_loop_in_float64(train: TrainSettings) -> None:
    # 20, 13, 9 and 3 samples, batch 8: batches (8, 8, 4), (8, 5), (9,) and (3,) per epoch (a trailing
    # batch of one joins the one before): every step pads some clients, and some have finished
    torch.manual_seed(0)
    model = bn_mlp_float64()
    sizes = [20, 13, 9, 3]
    expected = _sequential(model, _clients(sizes), train)
    states, metrics = train_clients_padded(copy.deepcopy(model), _clients(sizes), train)
    for state, metric, ref in zip(states, metrics, expected, strict=True):
        assert metric["train/steps"] == float(ref["steps"])
        for key, value in state.items():
            torch.testing.assert_close(value, ref[key], rtol=1e-10, atol=1e-10, msg=key)


def test_each_step_is_one_call_of_the_same_shapes() -> None:
    # what a CUDA graph needs: the static inputs keep their storage and shapes for every step of the round
    model = bn_mlp_float64()
    clients = _clients([20, 13, 9])
    batches = PaddedBatches.of([list(c.batches(ADAM)) for c in clients])
    assert batches.x.shape == (6, 3, 9, 8)  # 6 steps (client 0: 3 batches x 2 epochs), 3 clients, batch 9
    # step 3: client 0's last batch (4), client 1's first of epoch 2 (8); client 2 (9, 9) has finished
    assert batches.mask.sum(dim=2).tolist()[2] == [4.0, 8.0, 0.0]
    step = PaddedStep(model, clients[0].loss, {}, batches, ADAM)
    step.load(model, {}, ADAM)
    static = (step.x, step.y, step.mask, step.active, step.params.rows)
    pointers = [t.data_ptr() for t in static]
    for t in range(batches.steps):
        step.fill(batches, t)
        step.run()
        assert step.outputs is not None
        assert [t.data_ptr() for t in (step.x, step.y, step.mask, step.active, step.params.rows)] == pointers
        assert step.x.shape == (3, 9, 8) and step.outputs.shape == (2, 3)  # loss and ce, per client
    # client 2 (one batch of 9 per epoch) took 2 steps: its step count stopped there
    assert step.optimizer.steps.flatten().tolist() == [6.0, 4.0, 2.0]


@settings(max_examples=20, deadline=None)
@given(real=st.integers(2, 6), pad=st.integers(0, 4), channels=st.integers(1, 4))
def test_masked_batchnorm_equals_batchnorm_on_the_real_rows(real: int, pad: int, channels: int) -> None:
    gen = torch.Generator().manual_seed(real * 7 + pad)
    x = torch.randn(real + pad, channels, 3, 2, generator=gen, dtype=torch.float64)
    bn = nn.BatchNorm2d(channels).double()
    masked = copy.deepcopy(bn)
    mask = torch.cat([torch.ones(real), torch.zeros(pad)]).double()
    expected = bn(x[:real])
    with masked_batchnorm(masked, mask):
        out = masked(x)
    torch.testing.assert_close(out[:real], expected, rtol=1e-12, atol=1e-12)
    for key, value in bn.state_dict().items():
        torch.testing.assert_close(masked.state_dict()[key], value, rtol=1e-12, atol=1e-12)
    with masked_batchnorm(masked, torch.zeros(real + pad, dtype=torch.float64)):  # no real row: no update
        masked(x)
    assert int(masked.num_batches_tracked) == 1
    assert "forward" not in vars(masked)


def test_unmasked_hooks_are_refused() -> None:
    # a mean over the batch that is not a row_mask one would count the padded rows: not covered
    model = SplitModel([nn.Linear(8, 4)], FlattenPool(), nn.Linear(4, 3)).double()
    clients = _clients([8, 8])
    clients[0].loss = BatchableLoss(lambda m, x, y, c, s: LossOutput(m(x).square().mean()))
    with pytest.raises(
        ConfigError, match="client 0: padded batches train loss hooks whose batch means are masked"
    ):
        train_clients_padded(model, clients, ADAM)


def test_steps_are_kept_per_round_shape_and_dropped_for_another_hook() -> None:
    # a kept step is loaded with the round's weights and a fresh optimizer: the third round (the first's
    # shapes again) reuses the first's step and computes the first's result exactly
    model = bn_mlp_float64()
    first, _ = train_clients_padded(model, _clients([20, 13, 9, 3]), ADAM)
    train_clients_padded(model, _clients([16, 8, 8, 4]), ADAM)  # batches of 8, not 9: another shape
    kept = dict(padded._STEPS[model])
    assert len(kept) == 2
    again, _ = train_clients_padded(model, _clients([20, 13, 9, 3]), ADAM)
    assert padded._STEPS[model] == kept  # the same two step objects
    for state, ref in zip(again, first, strict=True):
        for key, value in ref.items():
            assert torch.equal(state[key], value), key
    clients = _clients([20, 13, 9, 3])
    for c in clients:
        c.loss = BatchableLoss(lambda m, x, y, c, s: LossOutput(mean_cross_entropy(m(x), y)), masked=True)
    train_clients_padded(model, clients, ADAM)
    assert len(padded._STEPS[model]) == 1 and not set(padded._STEPS[model].values()) & set(kept.values())


@settings(max_examples=15, deadline=None)
@given(sizes=st.lists(st.integers(2, 30), min_size=1, max_size=5), batch=st.integers(2, 9))
def test_padding_loses_and_repeats_no_sample(sizes: list[int], batch: int) -> None:
    # every client's samples appear once per epoch in its own column, in the sequential loop's order, and
    # every step has the round's one shape
    train = TrainSettings(local_epochs=2, batch_size=batch, lr=1e-2, optimizer="adam")
    schedules = [list(c.batches(train)) for c in _clients(sizes)]
    batches = PaddedBatches.of(schedules)
    steps, count, rows = batches.mask.shape
    assert (steps, count) == (max(map(len, schedules)), len(sizes))
    assert rows == max(x.shape[0] for s in schedules for x, _, _ in s)
    for c, schedule in enumerate(schedules):
        real = batches.mask[:, c].bool()
        assert torch.equal(batches.x[:, c][real], torch.cat([x for x, _, _ in schedule]))
        assert torch.equal(batches.y[:, c][real], torch.cat([y for _, y, _ in schedule]))
        assert int(real.sum()) == 2 * sizes[c]
        assert batches.active[:, c].tolist() == [t < len(schedule) for t in range(steps)]
    assert float(batches.x[~batches.mask.bool()].abs().sum()) == 0.0  # padded rows are zeros


@settings(max_examples=20, deadline=None)
@given(
    steps=st.integers(1, 6),
    lr=st.sampled_from([1e-2, 1e-3, 1e-4]),
    seed=st.integers(0, 2**16),
)
def test_float32_adam_updates_equal_torch_optims_to_rounding(steps: int, lr: float, seed: int) -> None:
    # In float32 the masked Adam computes what torch.optim.Adam computes, not only in float64: its bias
    # corrections were float32 tensors once, and 1 - 0.999**t lost 1.3e-5 of its value to cancellation,
    # making every update ~7e-6 (relative) too large, ~100x float32's rounding. Weights start at 0 so that
    # their own rounding stays near an ulp of the update's size. Measured over 360 cases (seeds 0-39, these
    # lr, 1/3/6 steps): at most 1.5e-6 of lr now, at least 6.8e-6 with the float32 corrections.
    gen = torch.Generator().manual_seed(seed)
    grads = [torch.randn(2, 500, generator=gen) for _ in range(steps)]
    grads = [g + g.sign() * 0.1 for g in grads]  # |g| >= 0.1: far from eps, each update ~lr
    rows = torch.zeros(2, 500)
    masked = padded.MaskedOptimizer(TrainSettings(lr=lr, optimizer="adam"), rows)
    reference = torch.zeros(2, 500, requires_grad=True)
    adam = torch.optim.Adam([reference], lr=lr, foreach=False)
    for g in grads:
        masked.step(rows, g, torch.ones(2, dtype=torch.bool))
        reference.grad = g.clone()
        adam.step()
    assert float((rows - reference.detach()).abs().max()) / lr < 3e-6
