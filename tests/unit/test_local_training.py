"""The local loop: batching, optimisers, and FedAvg with one client and one step == one SGD step."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedaug.api import ClientContext, ClientData, Payload, RunContext, TrainSettings
from fedaug.methods.fedavg import FedAvg
from fedaug.models import build_model
from fedaug.training.loop import (
    LossOutput,
    batch_indices,
    batchnorm_eval,
    cross_entropy_loss,
    load_weights,
    snapshot_state,
    train_local,
)
from tests.conftest import make_blobs


def test_batch_indices_cover_every_sample_once_and_avoid_singletons() -> None:
    order = torch.arange(65)
    batches = list(batch_indices(order, 32))
    assert [len(b) for b in batches] == [32, 33]  # the 65th sample joins the last batch
    assert torch.equal(torch.cat(batches), order)
    assert [len(b) for b in batch_indices(torch.arange(64), 32)] == [32, 32]
    assert [len(b) for b in batch_indices(torch.arange(1), 32)] == [1]


def test_fedavg_one_client_one_step_equals_centralised_sgd_step() -> None:
    # Prepare: one client whose whole data is one batch, SGD lr 0.1, one epoch -> exactly one step.
    torch.manual_seed(0)
    model = build_model("mlp", num_classes=3, input_shape=(8,))
    x, y = make_blobs(12)
    start = snapshot_state(model)
    reference = copy.deepcopy(model)
    settings = TrainSettings(local_epochs=1, batch_size=64, lr=0.1, optimizer="sgd")
    run = RunContext(num_clients=1, num_classes=3, input_shape=(8,), seed=0, num_rounds=1)
    ctx = ClientContext(
        client_id=0,
        round_num=1,
        data=ClientData(0, x, y, 3),
        model=model,
        generator=torch.Generator().manual_seed(0),
        run=run,
    )
    # Execute
    update = FedAvg().client_update(Payload(1, start, settings), ctx)
    reference.train()
    loss = F.cross_entropy(reference(x), y)
    loss.backward()
    with torch.no_grad():
        for param in reference.parameters():
            param -= 0.1 * param.grad
    # Assert
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(update.model_state[key], value)
    assert update.num_examples == 12
    assert update.metrics["train/steps"] == 1.0


def test_train_local_reduces_loss_and_is_deterministic() -> None:
    x, y = make_blobs(60)
    data = ClientData(0, x, y, 3)
    settings = TrainSettings(local_epochs=5, batch_size=16, lr=1e-2)
    results = []
    for _ in range(2):
        torch.manual_seed(1)
        model = build_model("mlp", num_classes=3, input_shape=(8,))
        with torch.no_grad():
            before = float(F.cross_entropy(model(x), y))
        metrics = train_local(
            model,
            data,
            loss_fn=cross_entropy_loss,
            settings=settings,
            generator=torch.Generator().manual_seed(3),
        )
        results.append((metrics, snapshot_state(model)))
        with torch.no_grad():
            assert float(F.cross_entropy(model(x), y)) < before
    assert results[0][0] == results[1][0]
    for key in results[0][1]:
        assert torch.equal(results[0][1][key], results[1][1][key])
    assert results[0][0]["train/steps"] == 20.0


def test_a_non_finite_loss_stops_training_with_the_step_named() -> None:
    # A loss that turns NaN at the third step: the client fails with that step named instead of returning
    # NaN weights. The check runs once, after the client's steps (no host-device sync per step on a GPU).
    x, y = make_blobs(48)
    calls = []

    def loss_fn(model: torch.nn.Module, xb: torch.Tensor, yb: torch.Tensor) -> LossOutput:
        calls.append(1)
        loss = F.cross_entropy(model(xb), yb)
        return LossOutput(loss * float("nan") if len(calls) == 3 else loss, {})

    model = build_model("mlp", num_classes=3, input_shape=(8,))
    settings = TrainSettings(local_epochs=1, batch_size=8)
    with pytest.raises(FloatingPointError, match=r"non-finite training loss \(nan\) at local step 3"):
        train_local(
            model, ClientData(0, x, y, 3), loss_fn=loss_fn, settings=settings, generator=torch.Generator()
        )
    assert len(calls) == 6  # 48 samples in batches of 8: every step ran before the check


def test_batchnorm_eval_freezes_only_batchnorm_and_restores_each_mode() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5), nn.BatchNorm1d(4))
    model.train()
    model[3].eval()  # a layer already in eval mode stays so
    before = model[1].running_mean.clone()
    with batchnorm_eval(model):
        assert not model[1].training and model[2].training
        model(torch.randn(8, 4))
    assert torch.equal(model[1].running_mean, before)
    assert model[1].training and model[2].training and not model[3].training


def test_batchnorm_eval_setting_trains_weights_but_keeps_running_statistics() -> None:
    # Prepare: Linear -> BN -> ReLU -> Linear with non-default running statistics
    x, y = make_blobs(40)
    data = ClientData(0, x, y, 3)

    def trained(freeze: bool) -> nn.Sequential:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
        model[1].running_mean.fill_(0.5)
        settings = TrainSettings(
            local_epochs=1, batch_size=10, lr=0.1, optimizer="sgd", batchnorm_eval=freeze
        )
        train_local(
            model,
            data,
            loss_fn=cross_entropy_loss,
            settings=settings,
            generator=torch.Generator().manual_seed(0),
        )
        return model

    # Execute
    frozen, plain = trained(True), trained(False)
    # Assert: frozen BN keeps its statistics (and its layer is back in training mode), plain BN moves them
    assert torch.equal(frozen[1].running_mean, torch.full((16,), 0.5))
    assert torch.equal(frozen[1].running_var, torch.ones(16))
    assert int(frozen[1].num_batches_tracked) == 0
    assert frozen[1].training
    assert not torch.equal(frozen[0].weight, plain[0].weight)
    assert int(plain[1].num_batches_tracked) == 4
    assert not torch.equal(plain[1].running_mean, torch.full((16,), 0.5))


def test_snapshot_state_is_an_independent_copy_of_every_entry() -> None:
    model = build_model("harnet", num_classes=6, input_shape=(1, 64, 3))
    before = {key: value.clone() for key, value in model.state_dict().items()}
    snap = snapshot_state(model)
    assert list(snap) == list(before)
    assert all(snap[k].dtype == v.dtype and torch.equal(snap[k], v) for k, v in before.items())
    with torch.no_grad():  # training (or anything else) changing the model leaves the snapshot alone
        for value in model.state_dict().values():
            value.add_(1)
    assert all(torch.equal(snap[k], v) for k, v in before.items())
    snap["blocks.0.0.weight"].zero_()  # entries are views of one copy, but of separate parts of it
    assert torch.equal(snap["blocks.0.0.bias"], before["blocks.0.0.bias"])


def test_load_weights_is_load_state_dict() -> None:
    torch.manual_seed(0)
    source, target = (build_model("harnet", num_classes=6, input_shape=(1, 64, 3)) for _ in range(2))
    load_weights(target, snapshot_state(source))
    for key, value in source.state_dict().items():
        assert torch.equal(target.state_dict()[key], value), key
    state = snapshot_state(source)
    del state["classifier.bias"]
    with pytest.raises(RuntimeError, match=r"Missing key\(s\) in state_dict: \"classifier.bias\""):
        load_weights(target, state)
