"""FedProx: mu = 0 is FedAvg, the proximal term by hand, its pull towards the global weights, validation."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fedaug.errors import ConfigError
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.fedprox import FedProx, FedProxConfig
from fedaug.methods.parts.losses import proximal_term
from tests.unit.methods.helpers import (
    assert_equals_fedavg,
    client_context,
    distance_to,
    initial_state,
    method_from_yaml,
    mlp_fn,
    payload,
    skewed_client,
)


def test_mu_zero_is_fedavg_exactly(tmp_path: Path) -> None:
    assert_equals_fedavg(tmp_path, FedProx(FedProxConfig(proximal_mu=0.0)), rounds=2, per_round=2)


def test_proximal_loss_by_hand() -> None:
    # Prepare: a linear model (2 inputs -> 2 classes) whose weights differ from the anchors by (1, 2 | 0, 0)
    # and biases by (2, 0): ||w - w_global||^2 = 1 + 4 + 4 = 9.
    x, y = torch.tensor([[0.5, -1.0]]), torch.tensor([1])
    ctx = client_context(x, y, model_fn=mlp_fn(num_classes=2, dim=2, hidden_sizes=()), num_classes=2)
    anchors = {"classifier.weight": torch.zeros(2, 2), "classifier.bias": torch.tensor([1.0, 0.0])}
    with torch.no_grad():
        ctx.model.classifier.weight.copy_(torch.tensor([[1.0, 2.0], [0.0, 0.0]]))
        ctx.model.classifier.bias.copy_(torch.tensor([3.0, 0.0]))
    # Execute
    loss_fn = FedProx(FedProxConfig(proximal_mu=0.1)).loss_fn(payload(anchors), ctx)
    out = loss_fn(ctx.model, x, y)
    # Assert: mu/2 * 9 = 0.45 on top of the cross-entropy.
    assert proximal_term(ctx.model, anchors).item() == pytest.approx(9.0)
    assert out.logs["prox"].item() == pytest.approx(0.45)
    expected_ce = F.cross_entropy(ctx.model(x), y)
    assert out.loss.item() == pytest.approx(expected_ce.item() + 0.45)
    assert out.logs["ce"].item() == pytest.approx(expected_ce.item())


def test_proximal_term_keeps_weights_closer_to_global() -> None:
    # Prepare: the same skewed client and global weights for both methods.
    x, y = skewed_client(classes=(0,))
    start = initial_state(mlp_fn())
    settings = {"local_epochs": 5, "batch_size": 8, "lr": 1e-2}
    # Execute
    fedavg = FedAvg().client_update(payload(start, **settings), client_context(x, y))
    fedprox = FedProx(FedProxConfig(proximal_mu=1.0)).client_update(
        payload(start, **settings), client_context(x, y)
    )
    # Assert
    assert fedprox.metrics["train/prox"] > 0
    assert distance_to(fedprox.model_state, start) < 0.5 * distance_to(fedavg.model_state, start)


def test_mu_zero_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="fedaug.methods.fedprox"):
        FedProx()
        assert not caplog.records
        FedProx(FedProxConfig(proximal_mu=0.0))
    assert len(caplog.records) == 1
    assert "proximal_mu=0" in caplog.records[0].getMessage()


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_config_rejects_bad_mu(bad: float) -> None:
    with pytest.raises(ConfigError, match=rf"proximal_mu .* got {bad}"):
        FedProxConfig(proximal_mu=bad)


def test_yaml_holds_the_defaults() -> None:
    method = method_from_yaml("fedprox")
    assert isinstance(method, FedProx)
    assert method.config == FedProxConfig() == FedProxConfig(proximal_mu=0.01)
