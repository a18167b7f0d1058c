"""FedRS: alpha = 1 is FedAvg, the scaling by hand, the client's (not the batch's) classes, validation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fedaug.errors import ConfigError
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.fedrs import FedRS, FedRSConfig
from fedaug.methods.parts.losses import restriction_scale
from tests.unit.methods.helpers import (
    assert_equals_fedavg,
    client_context,
    initial_state,
    method_from_yaml,
    mlp_fn,
    payload,
    run_sim,
    skewed_client,
)


def test_alpha_one_is_fedavg_exactly(tmp_path: Path) -> None:
    assert_equals_fedavg(tmp_path, FedRS(FedRSConfig(restricted_alpha=1.0)), rounds=2, per_round=2)
    # FedRS logs the same keys as FedAvg, so the whole metrics file is identical.
    assert run_sim(tmp_path / "again", FedRS(FedRSConfig(restricted_alpha=1.0)), rounds=2, per_round=2)[
        0
    ] == ((tmp_path / "fedavg" / "metrics.jsonl").read_text())


def test_scaling_by_hand() -> None:
    scale = restriction_scale(torch.tensor([5, 0, 2]), 0.5)
    torch.testing.assert_close(scale, torch.tensor([1.0, 0.5, 1.0]))
    logits = torch.tensor([[1.0, 2.0, 3.0]])
    torch.testing.assert_close(logits * scale, torch.tensor([[1.0, 1.0, 3.0]]))


def test_missing_classes_are_those_of_the_client_not_the_batch() -> None:
    # Prepare: the client has classes 0 and 1; the batch holds class 0 only.
    x, y = skewed_client(classes=(0, 1))
    ctx = client_context(x, y)
    loss_fn = FedRS(FedRSConfig(restricted_alpha=0.25)).loss_fn(payload(initial_state(mlp_fn())), ctx)
    batch = y == 0
    # Execute
    out = loss_fn(ctx.model, x[batch], y[batch])
    # Assert: only class 2 is restricted.
    expected = F.cross_entropy(ctx.model(x[batch]) * torch.tensor([1.0, 1.0, 0.25]), y[batch])
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_unscaled_bias_restricts_only_the_weight_term() -> None:
    # Prepare: a client without class 2 and a classifier with a clearly non-zero bias.
    x, y = skewed_client(classes=(0, 1))
    ctx = client_context(x, y)
    classifier = ctx.model.classifier
    with torch.no_grad():
        classifier.bias.copy_(torch.tensor([0.5, -1.0, 2.0]))
    config = FedRSConfig(restricted_alpha=0.25, scale_bias=False)
    # Execute
    out = FedRS(config).loss_fn(payload(initial_state(mlp_fn())), ctx)(ctx.model, x, y)
    # Assert: alpha * w_2^T h + b_2 for the missing class, w_c^T h + b_c for the others.
    weight_term = ctx.model.penultimate(x) @ classifier.weight.T
    logits = weight_term * torch.tensor([1.0, 1.0, 0.25]) + torch.tensor([0.5, -1.0, 2.0])
    assert out.loss.item() == pytest.approx(F.cross_entropy(logits, y).item(), rel=1e-6)
    scaled_bias = FedRS(FedRSConfig(restricted_alpha=0.25)).loss_fn(payload(initial_state(mlp_fn())), ctx)
    assert scaled_bias(ctx.model, x, y).loss.item() != pytest.approx(out.loss.item(), rel=1e-3)


def test_restriction_shrinks_the_missing_class_gradient() -> None:
    # Prepare: the same weights and batch for FedAvg and FedRS on a client without class 2.
    x, y = skewed_client(classes=(0, 1))
    start = initial_state(mlp_fn())

    def missing_row_grad(method: FedAvg) -> float:
        ctx = client_context(x, y)
        ctx.model.load_state_dict(start)
        method.loss_fn(payload(start), ctx)(ctx.model, x, y).loss.backward()
        grad = ctx.model.classifier.weight.grad
        assert grad is not None
        return float(grad[2].norm())

    # Execute
    plain, restricted = missing_row_grad(FedAvg()), missing_row_grad(FedRS(FedRSConfig(restricted_alpha=0.5)))
    # Assert: the missing class's classifier row gets a smaller gradient (alpha times its probability).
    assert 0 < restricted < 0.75 * plain


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_config_rejects_alpha_outside_unit_interval(bad: float) -> None:
    with pytest.raises(ConfigError, match=rf"restricted_alpha .* got {bad}"):
        FedRSConfig(restricted_alpha=bad)


def test_yaml_holds_the_defaults() -> None:
    method = method_from_yaml("fedrs")
    assert isinstance(method, FedRS)
    assert method.config == FedRSConfig() == FedRSConfig(restricted_alpha=0.5)
