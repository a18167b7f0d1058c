"""ZSDG: samples are recognised by their source model, BN loss by hand, no-BN error, determinism, oracle."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from fedaug.api import ClientData, TrainSettings
from fedaug.errors import ConfigError, IncompatibleModelError
from fedaug.methods.fedzda import zsdg
from fedaug.methods.fedzda.zsdg import (
    BNStatLoss,
    ZSDGSettings,
    batch_stats,
    channels_last_copy,
    class_accuracy,
    generate,
    plain_batch_stats,
    total_variation,
)
from fedaug.models import build_model
from fedaug.models.base import SplitModel
from fedaug.training.loop import cross_entropy_loss, snapshot_state, train_local
from tests.conftest import make_blobs
from tests.unit.methods.helpers import bn_mlp


def trained_bn_mlp(seed: int = 0) -> SplitModel:
    model = bn_mlp(seed=seed)
    x, y = make_blobs(300, seed=1)
    settings = TrainSettings(local_epochs=5, batch_size=32, lr=0.05, optimizer="sgd", momentum=0.9)
    train_local(
        model,
        ClientData(0, x, y, 3),
        loss_fn=cross_entropy_loss,
        settings=settings,
        generator=torch.Generator().manual_seed(seed),
    )
    return model


def test_samples_are_classified_as_their_target_far_above_chance() -> None:
    # Prepare: a small BN model trained on 3 Gaussian blobs (chance = 1/3).
    model = trained_bn_mlp()
    # Execute
    synthetic = generate(
        model,
        classes=range(3),
        per_class=20,
        input_shape=(8,),
        generator=torch.Generator().manual_seed(0),
        settings=ZSDGSettings(iterations=150, lr=0.1),
    )
    # Assert: balanced labels, and the source model labels most samples as their target (measured: 0.82).
    assert synthetic.x.shape == (60, 8)
    assert torch.equal(synthetic.y, torch.arange(3).repeat_interleave(20))
    with torch.no_grad():
        model.eval()
        acc = float((model(synthetic.x).argmax(dim=1) == synthetic.y).float().mean())
    assert acc >= 0.75
    assert synthetic.logs["acc"] == pytest.approx(acc)


def test_image_model_samples_match_bn_statistics_better_than_noise() -> None:
    # Prepare: the Fed-ZDA MNIST CNN on 8x8 inputs (untrained: its running stats are the init values).
    torch.manual_seed(0)
    model = build_model("bn_cnn_mnist", num_classes=4, input_shape=(1, 8, 8))
    gen = torch.Generator().manual_seed(0)
    start = generate(
        model,
        classes=range(4),
        per_class=4,
        input_shape=(1, 8, 8),
        generator=gen,
        settings=ZSDGSettings(iterations=0),
    )
    # Execute
    out = generate(
        model,
        classes=range(4),
        per_class=4,
        input_shape=(1, 8, 8),
        generator=torch.Generator().manual_seed(0),
        settings=ZSDGSettings(iterations=60, lr=0.1),
    )
    # Assert: optimisation lowered the BN mismatch, and most samples are classified as their target.
    with BNStatLoss(model) as bn:
        model.eval()
        with torch.no_grad():
            model(start.x)
        bn_start = float(bn.value)
    assert out.logs["bn"] < 0.8 * bn_start  # measured: 6.75 vs 9.71
    assert out.logs["acc"] >= 0.5  # chance 0.25; measured 0.75


def test_bn_loss_by_hand() -> None:
    # Prepare: one BatchNorm1d with running mean (1, 0) and variance (1, 4); a batch with per-feature
    # means (2, 0) and (biased) variances (1, 1).
    model = nn.Sequential(nn.BatchNorm1d(2))
    model[0].running_mean.copy_(torch.tensor([1.0, 0.0]))
    model[0].running_var.copy_(torch.tensor([1.0, 4.0]))
    x = torch.tensor([[1.0, -1.0], [3.0, 1.0]])
    # Execute
    with BNStatLoss(model, "squared") as squared, BNStatLoss(model, "l2") as plain:
        model.eval()
        model(x)
    # Assert: squared (paper Eq. 3) (2-1)^2 + 0 + (1-1)^2 + (1-4)^2 = 10; l2 (DeepInversion) 1 + 3 = 4.
    assert float(squared.value) == pytest.approx(10.0)
    assert float(plain.value) == pytest.approx(4.0)


def test_total_variation_by_hand() -> None:
    x = torch.tensor([[[[0.0, 1.0], [2.0, 3.0]]]])
    # vertical differences (2, 2): mean of squares 4; horizontal (1, 1): 1.
    assert float(total_variation(x)) == pytest.approx(5.0)


def test_model_without_batch_norm_is_a_clear_error() -> None:
    mlp = build_model("mlp", num_classes=3, input_shape=(8,))
    with pytest.raises(IncompatibleModelError, match=r"BatchNorm.*MLP has none"):
        generate(mlp, classes=range(3), per_class=2, input_shape=(8,), generator=torch.Generator())


def test_model_is_left_unchanged_and_runs_are_deterministic() -> None:
    model = trained_bn_mlp()
    model.train()
    before = snapshot_state(model)
    grads = [p.grad.clone() for p in model.parameters()]  # left over from training
    settings = ZSDGSettings(iterations=20)
    first = generate(
        model,
        classes=range(3),
        per_class=3,
        input_shape=(8,),
        generator=torch.Generator().manual_seed(5),
        settings=settings,
    )
    second = generate(
        model,
        classes=range(3),
        per_class=3,
        input_shape=(8,),
        generator=torch.Generator().manual_seed(5),
        settings=settings,
    )
    assert torch.equal(first.x, second.x)
    assert model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads, strict=True))


@pytest.mark.parametrize("shape", [(7, 3), (6, 4, 5, 3)])
def test_batch_stats_match_float64_variance(shape: tuple[int, ...]) -> None:
    # The two-pass statistics equal torch's var_mean over every axis but axis 1, computed in float64.
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0)) * 3 + 2
    mean, var = batch_stats(x)
    dims = [0, *range(2, x.dim())]
    ref_var, ref_mean = torch.var_mean(x.double(), dim=dims, unbiased=False)
    assert mean.shape == var.shape == (shape[1],)
    torch.testing.assert_close(mean.double(), ref_mean, rtol=1e-6, atol=0)
    torch.testing.assert_close(var.double(), ref_var, rtol=1e-6, atol=0)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "2d"])
def test_batch_stats_values_and_gradients_equal_the_plain_form_bit_for_bit(layout: str) -> None:
    # Prepare: a BN input in each layout ZSDG meets (conv outputs of a channels-last model, NCHW, BN1d)
    # and weights on both statistics, as the l2 BN term puts them.
    shape = (7, 5) if layout == "2d" else (6, 5, 4, 3)
    base = torch.randn(*shape, generator=torch.Generator().manual_seed(0)) * 3 + 2
    if layout == "channels_last":
        base = base.to(memory_format=torch.channels_last)
    weights = torch.randn(2, shape[1], generator=torch.Generator().manual_seed(1))

    def value_and_grad(stats: object) -> tuple[Tensor, Tensor, Tensor]:
        x = base.clone().requires_grad_(True)
        mean, var = stats(x)  # type: ignore[operator]
        (grad,) = torch.autograd.grad((mean * weights[0]).sum() + (var * weights[1]).sum(), [x])
        return mean.detach(), var.detach(), grad

    # Execute
    new, plain = value_and_grad(batch_stats), value_and_grad(plain_batch_stats)
    # Assert: the same bits, and the gradient in the same layout (later reductions sum in its order).
    assert all(torch.equal(a, b) for a, b in zip(new, plain, strict=True))
    assert new[2].stride() == plain[2].stride()


@pytest.mark.parametrize(
    ("name", "shape", "classes", "steps"),
    [
        ("bn_cnn_cifar", (3, 32, 32), 10, 30),
        ("bn_cnn_mnist", (1, 28, 28), 4, 30),
        ("harnet", (1, 128, 3), 6, 8),
    ],
)
def test_generate_gives_the_plain_statistics_samples_bit_for_bit(
    name: str, shape: tuple[int, ...], classes: int, steps: int
) -> None:
    # Prepare: the model with running statistics from a few train-mode batches (the optimisation amplifies
    # any rounding difference, so equal samples after several Adam steps mean equal gradients at each).
    torch.manual_seed(0)
    model = build_model(name, num_classes=classes, input_shape=shape)
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(32, *shape) * 2 + 0.5)
    kwargs = dict(
        classes=range(classes), per_class=5, input_shape=shape, settings=ZSDGSettings(iterations=steps)
    )
    # Execute: generate as the library does, and with the plain statistics (the code before).
    out = generate(model, generator=torch.Generator().manual_seed(1), **kwargs)  # type: ignore[arg-type]
    original = zsdg.batch_stats
    zsdg.batch_stats = plain_batch_stats
    try:
        plain = generate(model, generator=torch.Generator().manual_seed(1), **kwargs)  # type: ignore[arg-type]
    finally:
        zsdg.batch_stats = original
    # Assert
    assert torch.equal(out.x, plain.x)
    assert out.logs == plain.logs


def test_conv_model_generates_on_a_channels_last_copy_and_keeps_its_format() -> None:
    # Prepare: the BN CNN on 8x8 inputs (contiguous weights), with running stats from a few batches.
    torch.manual_seed(0)
    model = build_model("bn_cnn_mnist", num_classes=4, input_shape=(1, 8, 8))
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(16, 1, 8, 8))
    before = snapshot_state(model)
    conv = [p for p in model.parameters() if p.dim() == 4][-1]  # 16 -> 32 (1 input channel is both formats)
    kwargs = dict(classes=range(4), per_class=4, input_shape=(1, 8, 8), settings=ZSDGSettings(iterations=5))
    # Execute: generate as the library does, and with the copy replaced by the model itself (NCHW).
    out = generate(model, generator=torch.Generator().manual_seed(1), **kwargs)  # type: ignore[arg-type]
    original = zsdg.channels_last_copy
    zsdg.channels_last_copy = lambda m: m
    try:
        nchw = generate(model, generator=torch.Generator().manual_seed(1), **kwargs)  # type: ignore[arg-type]
    finally:
        zsdg.channels_last_copy = original
    # Assert: the caller's model keeps its format, values and mode; both layouts give the same samples to
    # float rounding; a model without conv weights is used as it is.
    assert conv.is_contiguous() and not conv.is_contiguous(memory_format=torch.channels_last)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.training
    torch.testing.assert_close(out.x, nchw.x, rtol=0, atol=1e-4)
    copy = channels_last_copy(model)
    assert copy is not model
    copy_conv = [p for p in copy.parameters() if p.dim() == 4][-1]
    assert copy_conv.is_contiguous(memory_format=torch.channels_last) and not copy_conv.is_contiguous()
    mlp = bn_mlp()
    assert channels_last_copy(mlp) is mlp


def test_zero_samples_and_bad_settings() -> None:
    model = bn_mlp()
    empty = generate(model, classes=range(3), per_class=0, input_shape=(8,), generator=torch.Generator())
    assert empty.x.shape == (0, 8) and empty.y.numel() == 0
    with pytest.raises(ConfigError, match="lr"):
        ZSDGSettings(lr=0.0)
    with pytest.raises(ConfigError, match="two spatial axes"):
        total_variation(torch.zeros(2, 8))


def test_class_accuracy_on_hand_made_predictions() -> None:
    # Prepare: an "oracle" that predicts the first input entry as the class.
    class Oracle(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.one_hot(x[:, 0].long(), 3).float()

    y = torch.tensor([0, 0, 0, 0, 1, 1])
    pred = torch.tensor([0, 0, 0, 1, 1, 2])  # class 0: 3/4, class 1: 1/2, class 2: absent
    # Execute
    acc = class_accuracy(Oracle(), pred[:, None].float(), y, num_classes=3, batch_size=4)
    # Assert
    assert acc[0].item() == 0.75 and acc[1].item() == 0.5 and math.isnan(acc[2].item())
