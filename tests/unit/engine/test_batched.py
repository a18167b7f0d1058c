"""engine.batched_clients: stacked weights train as the sequential loop (to 1e-5); unsupported cases fail."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

from fedaug import registry
from fedaug.api import ClientContext, ClientData, Payload, RunContext, TrainSettings
from fedaug.engine.batched.stacked import conv_model_note, train_round_batched
from fedaug.engine.simulation import Simulation
from fedaug.errors import ConfigError
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.qffl import QFFL
from fedaug.models import build_model
from fedaug.models.base import FlattenPool, SplitModel
from fedaug.training.loop import snapshot_state
from tests.conftest import make_spec
from tests.unit.engine.helpers import assert_same_run, unequal_float64_spec

RUN = RunContext(num_clients=4, num_classes=3, input_shape=(1, 8, 8), seed=0, num_rounds=1)


def _contexts(model: nn.Module, sizes: list[int]) -> list[ClientContext]:
    contexts = []
    for cid, size in enumerate(sizes):
        gen = torch.Generator().manual_seed(100 + cid)
        y = torch.randint(0, 3, (size,), generator=gen)
        x = torch.randn(size, 1, 8, 8, generator=gen) + y.view(-1, 1, 1, 1)
        contexts.append(
            ClientContext(
                client_id=cid,
                round_num=1,
                data=ClientData(cid, x, y, 3),
                model=model,  # type: ignore[arg-type]
                generator=torch.Generator().manual_seed(cid),
                run=RUN,
            )
        )
    return contexts


def _fresh(contexts: list[ClientContext]) -> list[ClientContext]:
    """The same contexts with generators reset (each run consumes them)."""
    return [replace(c, generator=torch.Generator().manual_seed(c.client_id)) for c in contexts]


ADAM = TrainSettings(local_epochs=2, batch_size=8, lr=1e-3, optimizer="adam", weight_decay=1e-3)
SGD_MOMENTUM = TrainSettings(local_epochs=2, batch_size=8, lr=5e-2, optimizer="sgd", momentum=0.9)
SGD = TrainSettings(local_epochs=1, batch_size=8, lr=5e-2, optimizer="sgd")
# A conv bias right before batch norm has a true gradient of zero (BN subtracts the batch mean); its
# computed gradient is float noise that Adam divides by its own magnitude, so sequential and batched runs
# move these biases (and the running means that absorb them) by different O(lr) amounts. The network's
# function does not depend on them; everything else must agree to 1e-5.
BIAS_BEFORE_BN = {"blocks.0.0.bias", "blocks.1.0.bias", "blocks.0.1.running_mean", "blocks.1.1.running_mean"}


@pytest.mark.parametrize(
    ("model_name", "settings", "loose"),
    [
        ("bn_cnn_mnist", SGD_MOMENTUM, set()),
        ("bn_cnn_mnist", SGD, set()),
        ("bn_cnn_mnist", ADAM, BIAS_BEFORE_BN),
        ("mlp", ADAM, set()),
    ],
    ids=["bncnn-sgd-momentum", "bncnn-sgd", "bncnn-adam", "mlp-adam"],
)
def test_batched_round_equals_sequential_client_updates(
    model_name: str, settings: TrainSettings, loose: set[str]
) -> None:
    # Prepare: 3 clients of 17 samples (batches 8 + 9: the trailing singleton joins the last batch) and one
    # of 12 (a group of its own); the BN CNN's running statistics are updated inside vmap.
    torch.manual_seed(0)
    model = build_model(model_name, num_classes=3, input_shape=(1, 8, 8))
    payload = Payload(1, snapshot_state(model), settings)
    contexts = _contexts(model, [17, 12, 17, 17])
    # Execute
    sequential = [FedAvg().client_update(payload, ctx) for ctx in _fresh(contexts)]
    batched = train_round_batched(FedAvg(), payload, _fresh(contexts))
    # Assert: same clients in order, parameters and BN buffers to 1e-5, same metrics
    assert [u.client_id for u in batched] == [0, 1, 2, 3]
    for seq, bat in zip(sequential, batched, strict=True):
        assert bat.num_examples == seq.num_examples
        assert list(bat.model_state) == list(seq.model_state)
        for key, value in seq.model_state.items():
            tol = 10 * settings.lr if key in loose else 1e-5
            torch.testing.assert_close(bat.model_state[key], value, rtol=1e-5, atol=tol)
        assert not torch.equal(seq.model_state["classifier.weight"], payload.model_state["classifier.weight"])
        assert bat.metrics["train/steps"] == seq.metrics["train/steps"]
        assert bat.metrics["train/loss"] == pytest.approx(seq.metrics["train/loss"], abs=1e-5)
        assert bat.metrics["train/ce"] == pytest.approx(seq.metrics["train/ce"], abs=1e-5)


@pytest.mark.parametrize("settings", [ADAM, SGD_MOMENTUM], ids=["adam", "sgd-momentum"])
def test_batched_equals_sequential_to_1e_10_in_float64_over_many_steps(settings: TrainSettings) -> None:
    # In float32 the two paths drift apart over long client runs: both round differently, and training
    # amplifies rounding differences (studies/speed/README.md measures the sequential float32 loop as
    # far from its own float64 result as the batched one). In float64 the rounding is 1e-16, so any
    # difference left over 30 steps per client would be a difference in the algorithm itself.
    torch.manual_seed(0)
    model = build_model("bn_cnn_mnist", num_classes=3, input_shape=(1, 8, 8)).double()
    payload = Payload(1, snapshot_state(model), replace(settings, local_epochs=3))
    contexts = [replace(c, data=replace(c.data, x=c.data.x.double())) for c in _contexts(model, [80, 80])]
    sequential = [FedAvg().client_update(payload, ctx) for ctx in _fresh(contexts)]
    batched = train_round_batched(FedAvg(), payload, _fresh(contexts))
    assert sequential[0].metrics["train/steps"] == 30
    for seq, bat in zip(sequential, batched, strict=True):
        for key, value in seq.model_state.items():
            torch.testing.assert_close(bat.model_state[key], value, rtol=0, atol=1e-10)
        moved = (seq.model_state["blocks.0.0.weight"] - payload.model_state["blocks.0.0.weight"]).abs().max()
        assert moved > 1e-3


def test_batched_simulation_matches_sequential_simulation(tmp_path: Path) -> None:
    Simulation(make_spec(tmp_path / "seq", rounds=2, per_round=3)).run()
    Simulation(replace(make_spec(tmp_path / "bat", rounds=2, per_round=3), batched_clients=True)).run()
    seq = torch.load(tmp_path / "seq" / "ckpt" / "latest.pt", weights_only=False)["state"]["model_state"]
    bat = torch.load(tmp_path / "bat" / "ckpt" / "latest.pt", weights_only=False)["state"]["model_state"]
    for key, value in seq.items():
        torch.testing.assert_close(bat[key], value, rtol=1e-5, atol=1e-5)


class _DropoutNet(SplitModel):
    def __init__(self) -> None:
        super().__init__([nn.Sequential(nn.Flatten(), nn.Dropout(0.5))], FlattenPool(), nn.Linear(64, 3))


@pytest.mark.parametrize(
    ("method", "settings", "reason"),
    [
        (QFFL(), TrainSettings(), "method 'qffl' has a client step of its own"),
        (FedAvg(), TrainSettings(precision="bf16"), "precision=bf16"),
        (FedAvg(), TrainSettings(reset_optimizer_every_step=True), "reset_optimizer_every_step"),
        (FedAvg(), TrainSettings(batchnorm_eval=True), "BatchNorm in eval mode while training"),
    ],
)
def test_unsupported_cases_are_refused_with_the_reason(
    method: FedAvg, settings: TrainSettings, reason: str
) -> None:
    model = build_model("bn_cnn_mnist", num_classes=3, input_shape=(1, 8, 8))
    payload = Payload(1, snapshot_state(model), settings)
    with pytest.raises(ConfigError, match=reason):
        train_round_batched(method, payload, _contexts(model, [8, 8]))


def test_models_with_dropout_are_refused() -> None:
    model = _DropoutNet()
    payload = Payload(1, snapshot_state(model), TrainSettings(batch_size=8))
    with pytest.raises(ConfigError, match="dropout"):
        train_round_batched(FedAvg(), payload, _contexts(model, [8, 8]))


def test_conv_models_get_a_note_that_batching_does_not_pay() -> None:
    note = conv_model_note(build_model("bn_cnn_mnist", num_classes=3, input_shape=(1, 8, 8)))
    assert note is not None and "2 conv layers" in note and "0.8-1.05x" in note
    assert conv_model_note(build_model("mlp", num_classes=3, input_shape=(1, 8, 8))) is None


BATCHED_METHODS = [
    "fedavg",
    "fedprox",
    "fedlc",
    "fedrs",
    "feddecorr",
    "fedntd",
    "flea",
    "moon",
    "feddata",
    "ccvr",
]


@pytest.mark.parametrize("name", BATCHED_METHODS)
def test_batched_loss_hook_methods_equal_the_sequential_loop_with_unequal_clients(
    tmp_path: Path, name: str
) -> None:
    # Three rounds in float64: FLea's second and third rounds mix with its buffer (per-client draws of
    # buffer indices and Beta weights, made in the sequential order), FedNTD and FLea distil from the
    # broadcast model, FedLC/FedRS stack their per-client logit shifts and scales.
    method = registry.get("method", name)()
    Simulation(unequal_float64_spec(tmp_path / "seq", method)).run()
    Simulation(replace(unequal_float64_spec(tmp_path / "bat", method), batched_clients=True)).run()
    assert_same_run(tmp_path / "seq", tmp_path / "bat")


def test_methods_with_their_own_client_step_fall_back_with_the_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    method = registry.get("method", "qffl")()
    Simulation(unequal_float64_spec(tmp_path / "seq", method)).run()
    with caplog.at_level(logging.WARNING):
        Simulation(replace(unequal_float64_spec(tmp_path / "bat", method), batched_clients=True)).run()
    assert caplog.text.count("training clients one by one (method 'qffl' has a client step of its own)") == 1
    seq = (tmp_path / "seq" / "metrics.jsonl").read_text()
    assert (tmp_path / "bat" / "metrics.jsonl").read_text() == seq
