"""FedDecorr: the loss on known matrices, one forward pass, its decorrelating effect, model checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fedaug.errors import ConfigError, IncompatibleModelError
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.feddecorr import FedDecorr, FedDecorrConfig
from fedaug.methods.parts.losses import decorrelation_loss
from fedaug.models import build_model
from tests.unit.methods.helpers import (
    assert_equals_fedavg,
    client_context,
    initial_state,
    method_from_yaml,
    mlp_fn,
    payload,
    skewed_client,
)


def test_decorrelation_loss_on_known_matrices() -> None:
    # Columns a, b, a: standardised entries are +-sqrt(3/4) (unbiased variance 4/3), so Z^T Z has
    # off-diagonal entries (0, 3, 0, 0, 3, 0); their mean square is 3, divided by N = 4 gives 0.75.
    a, b = [1.0, 1.0, -1.0, -1.0], [1.0, -1.0, 1.0, -1.0]
    duplicated = torch.tensor([a, b, a]).T
    assert decorrelation_loss(duplicated).item() == pytest.approx(0.75, rel=1e-6)
    # Orthogonal columns are uncorrelated; one sample has no correlation at all.
    assert decorrelation_loss(torch.tensor([a, b]).T).item() == pytest.approx(0.0, abs=1e-12)
    assert decorrelation_loss(torch.tensor([[1.0, 2.0, 3.0]])).item() == 0.0
    # Scale and shift of a column do not change a correlation.
    scaled = torch.tensor([a, [5 * v + 2 for v in b], a]).T
    assert decorrelation_loss(scaled).item() == pytest.approx(0.75, rel=1e-6)
    with pytest.raises(ValueError, match="got 1"):
        decorrelation_loss(torch.ones(4, 1))


def test_fewer_samples_than_dimensions_by_hand_and_against_the_gram_formula() -> None:
    # Columns a, b, a, b, a (N = 4 < d = 5): Z^T Z has 8 off-diagonal entries 3 (same-type pairs) and 12
    # zeros; the mean square over the 20 entries is 72 / 20 = 3.6, divided by N = 4 gives 0.9.
    a, b = [1.0, 1.0, -1.0, -1.0], [1.0, -1.0, 1.0, -1.0]
    assert decorrelation_loss(torch.tensor([a, b, a, b, a]).T).item() == pytest.approx(0.9, rel=1e-6)
    # Random features, the N x N path against the d x d Gram matrix written out, value and gradient.
    features = torch.randn(6, 50, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    features.requires_grad_(True)
    z = features - features.mean(dim=0)
    z = z / torch.sqrt(1e-8 + z.var(dim=0))
    gram = z.T @ z
    expected = (gram - torch.diag(torch.diag(gram))).pow(2).sum() / (50 * 49) / 6
    value = decorrelation_loss(features)
    assert value.item() == pytest.approx(expected.item(), rel=1e-12)
    grad = torch.autograd.grad(value, features)[0]
    expected_grad = torch.autograd.grad(expected, features)[0]
    assert torch.allclose(grad, expected_grad, rtol=1e-10, atol=1e-14)


def test_loss_uses_one_forward_pass() -> None:
    # Prepare
    x, y = skewed_client(num=8)
    ctx = client_context(x, y)
    calls: list[int] = []
    ctx.model.blocks[0].register_forward_hook(lambda *_: calls.append(1))
    # Execute
    out = FedDecorr(FedDecorrConfig(decorr_beta=0.5)).loss_fn(payload(initial_state(mlp_fn())), ctx)(
        ctx.model, x, y
    )
    # Assert: one pass through the blocks, and the loss is CE(model(x)) + beta * L(penultimate(x)).
    assert len(calls) == 1
    expected = F.cross_entropy(ctx.model(x), y) + 0.5 * decorrelation_loss(ctx.model.penultimate(x))
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert out.logs["decorr"].item() > 0


def test_beta_zero_is_fedavg_exactly(tmp_path: Path) -> None:
    assert_equals_fedavg(tmp_path, FedDecorr(FedDecorrConfig(decorr_beta=0.0)), rounds=2, per_round=2)


def test_decorrelation_term_decorrelates_the_features() -> None:
    # Prepare: a one-class client collapses its features under plain CE.
    x, y = skewed_client(num=32, classes=(0,))
    start = initial_state(mlp_fn())
    settings = {"local_epochs": 10, "batch_size": 16, "lr": 1e-2}
    # Execute
    ctx_avg, ctx_decorr = client_context(x, y), client_context(x, y)
    FedAvg().client_update(payload(start, **settings), ctx_avg)
    update = FedDecorr(FedDecorrConfig(decorr_beta=10.0)).client_update(
        payload(start, **settings), ctx_decorr
    )
    # Assert
    with torch.no_grad():
        after_avg = decorrelation_loss(ctx_avg.model.penultimate(x)).item()
        after_decorr = decorrelation_loss(ctx_decorr.model.penultimate(x)).item()
    assert update.metrics["train/decorr"] > 0
    assert after_decorr < 0.6 * after_avg  # measured: 0.63 vs 1.30


def test_works_on_conv_models_and_refuses_one_dimensional_features() -> None:
    images, labels = torch.randn(4, 1, 28, 28), torch.tensor([0, 1, 2, 0])
    ctx = client_context(
        images, labels, model_fn=lambda: build_model("lenet5", num_classes=3, input_shape=(1, 28, 28))
    )
    out = FedDecorr().loss_fn(payload(ctx.model.state_dict()), ctx)(ctx.model, images, labels)
    assert torch.isfinite(out.loss)
    x, y = torch.randn(4, 1), torch.tensor([0, 1, 2, 0])
    ctx = client_context(x, y, model_fn=mlp_fn(dim=1, hidden_sizes=()))
    with pytest.raises(IncompatibleModelError, match="has 1"):
        FedDecorr().client_update(payload(ctx.model.state_dict()), ctx)


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_config_rejects_bad_beta(bad: float) -> None:
    with pytest.raises(ConfigError, match=rf"decorr_beta .* got {bad}"):
        FedDecorrConfig(decorr_beta=bad)


def test_yaml_holds_the_defaults() -> None:
    method = method_from_yaml("feddecorr")
    assert isinstance(method, FedDecorr)
    assert method.config == FedDecorrConfig() == FedDecorrConfig(decorr_beta=0.1)
