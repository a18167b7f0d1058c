"""Distance correlation: agrees with the ``dcor`` package, known values, finite gradients."""

from __future__ import annotations

import dcor
import pytest
import torch

from fedaug.errors import ConfigError
from fedaug.privacy.dcor import (
    DECOR_FORMS,
    decorrelation_loss,
    distance_correlation,
    trace_correlation,
    u_distance_correlation_sqr,
)


@pytest.mark.parametrize(("n", "dx", "df"), [(8, 3, 5), (32, 384, 64), (64, 20, 200)])
def test_matches_the_dcor_package(n: int, dx: int, df: int) -> None:
    gen = torch.Generator().manual_seed(n)
    x = torch.randn(n, dx, generator=gen)
    f = torch.tanh(x[:, :1] * 2) + torch.randn(n, df, generator=gen)  # dependent through one coordinate
    expected = dcor.distance_correlation(x.double().numpy(), f.double().numpy())
    assert distance_correlation(x, f) == pytest.approx(expected, abs=1e-5)
    expected_u = dcor.u_distance_correlation_sqr(x.double().numpy(), f.double().numpy())
    assert u_distance_correlation_sqr(x, f) == pytest.approx(expected_u, abs=1e-5)
    # the loss form (float32, clamped distances) is the square of the metric up to the clamp
    loss = float(decorrelation_loss(x, f, form="dcor_squared"))
    assert loss == pytest.approx(expected**2, abs=1e-4)


def test_linear_maps_give_one_and_independent_low_dim_data_gives_near_zero() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(200, 2, generator=gen)
    rotation = torch.tensor([[0.6, -0.8], [0.8, 0.6]])  # dCor is 1 for similarity maps (rotate, scale, shift)
    assert distance_correlation(x, 3.0 * x @ rotation + 1.0) == pytest.approx(1.0)
    assert float(decorrelation_loss(x, -2.0 * x, form="dcor_squared")) == pytest.approx(1.0, abs=1e-5)
    assert float(trace_correlation(x, 5.0 * x)) == pytest.approx(1.0, abs=1e-5)
    a, b = torch.randn(1000, 1, generator=gen), torch.randn(1000, 1, generator=gen)
    assert distance_correlation(a, b) < 0.1
    assert abs(u_distance_correlation_sqr(a, b)) < 0.01


def test_plain_dcor_is_biased_towards_one_in_high_dimension_but_u_statistic_is_not() -> None:
    gen = torch.Generator().manual_seed(1)
    x, f = torch.randn(64, 3072, generator=gen), torch.randn(64, 3072, generator=gen)
    assert distance_correlation(x, f) > 0.99  # the V-statistic's bias: about 0.9975 for 3072-d at n = 64
    assert abs(u_distance_correlation_sqr(x, f)) < 0.05


@pytest.mark.parametrize("form", DECOR_FORMS)
def test_gradients_are_finite_even_with_duplicate_rows(form: str) -> None:
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(16, 10, generator=gen)
    x[1] = x[0]  # zero off-diagonal distance: the unclamped sqrt would give NaN gradients
    f = torch.randn(16, 30, generator=gen, requires_grad=True)
    with torch.no_grad():
        f[3] = f[2]
    loss = decorrelation_loss(x, f, form=form)
    loss.backward()
    assert torch.isfinite(loss)
    assert f.grad is not None and torch.isfinite(f.grad).all()
    assert f.grad.abs().sum() > 0


@pytest.mark.parametrize("form", DECOR_FORMS)
@pytest.mark.parametrize("case", ["identical inputs", "constant features", "one sample", "tiny features"])
def test_gradients_are_finite_when_the_features_carry_no_spread(form: str, case: str) -> None:
    # The degenerate batches a long run meets: identical inputs (nu^2(X, X) = 0: the old where-masked
    # division gave NaN gradients here; a FLea Dir(0.1) UCI-HAR run turned NaN at round 32), features
    # collapsed to a constant, a batch of one sample, tiny features. A NaN here poisons the global model.
    gen = torch.Generator().manual_seed(3)
    n = 1 if case == "one sample" else 8
    x = torch.ones(n, 10) if case == "identical inputs" else torch.randn(n, 10, generator=gen)
    f = torch.ones(n, 6) if case == "constant features" else torch.randn(n, 6, generator=gen)
    if case == "tiny features":
        f = f * 1e-4
    f.requires_grad_(True)
    loss = decorrelation_loss(x, f, form=form)
    loss.backward()
    assert torch.isfinite(loss)
    assert f.grad is not None and torch.isfinite(f.grad).all()


def test_official_form_is_the_square_root_of_the_paper_form() -> None:
    gen = torch.Generator().manual_seed(3)
    x, f = torch.randn(32, 6, generator=gen), torch.randn(32, 9, generator=gen) + 0.0
    f = f + x[:, :1]
    squared = float(decorrelation_loss(x, f, form="dcor_squared"))
    assert float(decorrelation_loss(x, f, form="dcor")) == pytest.approx(squared**0.5, abs=1e-3)


def test_unknown_form_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="valid choices: dcor_squared, dcor, trace"):
        decorrelation_loss(torch.zeros(4, 2), torch.zeros(4, 2), form="nope")
