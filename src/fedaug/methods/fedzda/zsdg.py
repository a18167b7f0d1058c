"""ZSDG: zero-shot data generation from a trained model's batch-norm statistics (Fed-ZDA's Algorithm 1).

Towards Fair Federated Learning with Zero-Shot Data Augmentation. W. Hao, M. El-Khamy, J. Lee, J. Zhang,
K. J. Liang, C. Chen, L. Carin. CVPR Workshops 2021. arXiv:2104.13417. Section 3.2, Eq. 3, Algorithm 1; in the
line of DeepInversion (Yin et al., CVPR 2020) and ZeroQ (Cai et al., CVPR 2020).

For target classes n = 1..N, inputs x are drawn from N(0, 1) (in the model's normalised input space) and
optimised with Adam, the model frozen in eval mode, to minimise::

    bn_weight * sum_l ( ||mean_l(x) - running_mean_l||^2 + ||var_l(x) - running_var_l||^2 )
    + ce_weight * CE(model(x), n) + tv_weight * TV(x)

where ``mean_l(x)`` and ``var_l(x)`` are the per-channel batch statistics of the input of BN layer l over the
synthetic batch (all classes in one batch, as Algorithm 1 forwards ``M(x(n))`` for all n together),
computed by forward hooks. Only models with BatchNorm layers that track running statistics qualify
(:class:`~fedaug.errors.IncompatibleModelError` otherwise).

The distances are plain l2 norms by default (DeepInversion; ``bn_norm``), squared in the paper's Eq. 3.
Paper is inconsistent on sigma: it calls the stored BN parameter a variance and the batch statistic a standard
deviation. We match variances (what BN stores; DeepInversion also matches variances).
Paper is silent on iterations, learning rate and priors: defaults in DeepInversion's range (Adam lr 0.05, 500
iterations, no TV prior; DeepInversion's l2 total variation is an option; docs/methods/fedzda.md).

Also here: :func:`class_accuracy`, the paper's quality check (Section 4.4): accuracy per class of an
independently trained ("oracle") classifier on generated samples.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from fedaug.errors import ConfigError, IncompatibleModelError
from fedaug.validation import check_choice, check_int, check_number

BN_NORMS = ("squared", "l2")


@dataclass(frozen=True)
class ZSDGSettings:
    """How synthetic samples are optimised.

    Attributes:
        iterations: Adam steps on the inputs (DeepInversion-style: a few hundred to 2000; default 500).
        lr: Adam learning rate on the inputs (DeepInversion-style: about 0.05-0.1; default 0.05).
        bn_weight: weight of the BN statistics term (paper: 1).
        ce_weight: weight of the class cross-entropy (paper: 1).
        tv_weight: weight of the l2 total-variation prior on image inputs (paper: none, 0).
        init_std: standard deviation of the Gaussian initialisation (default 1, the normalised data's scale).
        bn_norm: ``l2`` (default; DeepInversion's plain l2 norms of the statistics' differences) or
            ``squared`` (paper Eq. 3: squared l2 distances).
    """

    iterations: int = 500
    lr: float = 0.05
    bn_weight: float = 1.0
    ce_weight: float = 1.0
    tv_weight: float = 0.0
    init_std: float = 1.0
    # Deviation from paper: Eq. 3 squares the distances, which lets the BN term swamp the CE, and
    # DeepInversion, which the paper builds on, uses plain l2 norms. With l2 more samples get their target
    # class (a centrally trained FMNIST bn_cnn_mnist, 200 steps at lr 0.1: 100% vs 53% by the model, 34% vs
    # 13% by an independent oracle). ``bn_norm: squared`` is the paper's form.
    bn_norm: str = "l2"

    def __post_init__(self) -> None:
        check_choice("ZSDG bn_norm", self.bn_norm, BN_NORMS)
        check_int("ZSDG iterations", self.iterations, 0)
        for name in ("lr", "init_std"):
            check_number(f"ZSDG {name}", getattr(self, name), 0, low_open=True)
        for name in ("bn_weight", "ce_weight", "tv_weight"):
            check_number(f"ZSDG {name}", getattr(self, name), 0)


@dataclass
class Synthetic:
    """Generated samples, their target labels and the final values of the objective's parts.

    Attributes:
        x: inputs ``[n, *input_shape]`` (detached).
        y: target classes ``[n]``.
        logs: ``bn``, ``ce``, ``tv`` (last iteration) and ``acc``, the fraction of samples the source model
            classifies as their target (measured after the last step).
    """

    x: Tensor
    y: Tensor
    logs: dict[str, float] = field(default_factory=dict)


def bn_layers(model: nn.Module) -> list[_BatchNorm]:
    """The BatchNorm layers of ``model`` that track running statistics.

    Raises:
        IncompatibleModelError: if there are none (ZSDG has nothing to match).
    """
    layers = [m for m in model.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]
    if not layers:
        raise IncompatibleModelError(
            f"zero-shot data generation needs BatchNorm layers with running statistics, and "
            f"{type(model).__name__} has none; use a model with BN (e.g. bn_cnn_mnist, bn_cnn_cifar, harnet)"
        )
    return layers


class BNStatLoss:
    """Forward hooks summing ``||batch mean - running mean||^2 + ||batch var - running var||^2`` over BN.

    ``norm="l2"`` sums the plain l2 norms instead (DeepInversion). Use as a context manager; :attr:`value`
    holds the sum of the last forward pass.
    """

    def __init__(self, model: nn.Module, norm: str = "l2") -> None:
        self.layers = bn_layers(model)
        self.squared = norm == "squared"
        self.terms: list[Tensor] = []
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def _hook(self, module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> None:
        del output
        assert isinstance(module, _BatchNorm)
        x = inputs[0]
        mean, var = batch_stats(x)
        running_mean, running_var = module.running_mean, module.running_var
        assert running_mean is not None and running_var is not None
        if self.squared:
            self.terms.append((mean - running_mean).pow(2).sum() + (var - running_var).pow(2).sum())
        else:
            self.terms.append((mean - running_mean).norm() + (var - running_var).norm())

    @property
    def value(self) -> Tensor:
        return torch.stack(self.terms).sum()

    def __enter__(self) -> BNStatLoss:
        self._handles = [layer.register_forward_hook(self._hook) for layer in self.layers]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def plain_batch_stats(x: Tensor) -> tuple[Tensor, Tensor]:
    """Per-channel mean and biased variance of ``x`` over every axis but axis 1 (what BN normalises with).

    Two passes (the mean, then the mean of squared deviations) rather than ``Tensor.var``: on CPU the
    multi-axis ``var`` was ZSDG's slowest op (19% of a step for the BN CNN at batch 100, one thread), and
    the two-pass form makes the whole step 1.1-1.2x faster for the BN CNN (``benchmarks/zsdg_step.py``) at
    float32 accuracy (relative error ~5e-7 against float64). :func:`batch_stats` computes the same on a CPU
    with a cheaper backward.
    """
    dims = [0, *range(2, x.dim())]  # every axis but the channel axis
    mean = x.mean(dim=dims)
    centred = x - mean.view(1, -1, *([1] * (x.dim() - 2)))
    return mean, centred.pow(2).mean(dim=dims)


class _SumOfSquares(torch.autograd.Function):
    """``x.pow(2).sum(dims)`` whose backward is one full-size multiply, ``(2 * grad) * x``.

    Autograd's own backward of ``pow(2)`` then ``sum`` broadcasts the per-channel gradient and takes three
    full-size ops (``x.pow(1)``, ``2 * x``, the product). The values are the same bit for bit: doubling is
    exact, so ``(2g) * x`` and ``g * (2x)`` round the same product once. The result is laid out contiguous
    (NCHW), as autograd's is, so the reductions that follow sum in the same order.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, dims: list[int]) -> Tensor:
        ctx.save_for_backward(x)
        ctx.dims = dims
        return x.pow(2).sum(dim=dims)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (x,) = ctx.saved_tensors
        shape = [1 if d in ctx.dims else size for d, size in enumerate(x.shape)]
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        return torch.mul((grad * 2.0).view(shape), x, out=out), None


def batch_stats(x: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`plain_batch_stats`'s values and gradients, bit for bit, with fewer full-size ops in the backward
    on a CPU (``benchmarks/zsdg_step.py``, ``benchmarks/zda_round_cpu.py``: a ZSDG step of the CIFAR-10 BN CNN
    1.2-1.45x faster, of the MNIST one 1.45x, HARNet's 1.2x).

    On a CPU ATen computes ``x.mean(dims)`` as ``x.sum(dims)`` divided by the count, so the two are equal,
    but ``mean``'s backward broadcasts the ``[C]`` gradient and then divides it (a full-size op), and
    ``sum / count``'s divides the ``[C]`` gradient and then broadcasts it (a view). ``x + (-mean)`` equals
    ``x - mean``; its backward negates the ``[C]`` sum of the gradient, not the full gradient. The squares'
    sum is :class:`_SumOfSquares`. ``tests/unit/methods/test_zsdg.py`` checks gradients and generated samples
    against :func:`plain_batch_stats`'s. On other devices (a GPU's mean is not sum / count) it is
    :func:`plain_batch_stats`.
    """
    if x.device.type != "cpu":
        return plain_batch_stats(x)
    dims = [0, *range(2, x.dim())]  # every axis but the channel axis
    count = x.numel() // x.shape[1]
    mean = x.sum(dim=dims) / count
    centred = x + mean.neg().view(1, -1, *([1] * (x.dim() - 2)))
    squares: Tensor = _SumOfSquares.apply(centred, dims)  # type: ignore[no-untyped-call]
    return mean, squares / count


def total_variation(x: Tensor) -> Tensor:
    """DeepInversion's l2 prior: mean squared difference of neighbouring entries along the last two axes."""
    if x.dim() < 3:
        shape = tuple(x.shape)
        raise ConfigError(f"the total-variation prior needs inputs with two spatial axes, got shape {shape}")
    dh = (x[..., 1:, :] - x[..., :-1, :]).pow(2).mean()
    dw = (x[..., :, 1:] - x[..., :, :-1]).pow(2).mean()
    return dh + dw


def channels_last_copy(model: nn.Module) -> nn.Module:
    """A channels-last copy of ``model`` if it has 4-D (conv) weights, else ``model`` itself.

    ZSDG runs the model frozen in eval mode, where channels-last convolutions, BN and max-pooling are as
    accurate as the default format and faster on CPU (``benchmarks/zsdg_step.py``, with :func:`batch_stats`:
    a ZSDG step 1.3-1.5x faster for the BN CNN and 1.3x for HARNet). A copy, so that the caller's model (a
    training workspace) keeps its format.
    """
    if not any(p.dim() == 4 for p in model.parameters()):
        return model
    work = copy.deepcopy(model)
    work.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return work


def generate(
    model: nn.Module,
    *,
    classes: Sequence[int],
    per_class: int,
    input_shape: Sequence[int],
    generator: torch.Generator,
    settings: ZSDGSettings | None = None,
) -> Synthetic:
    """Generates ``per_class`` samples of every class in ``classes`` from ``model`` (one batch, Algorithm 1).

    The model's weights, buffers, memory format and train/eval mode are unchanged on return (a conv model is
    run as a channels-last copy, :func:`channels_last_copy`; it is run in eval mode and only the inputs
    receive gradients).

    Args:
        model: the trained model to invert (needs BatchNorm layers).
        classes: target classes (e.g. ``range(num_classes)``).
        per_class: samples per class (0 gives an empty result without touching the model).
        input_shape: shape of one input, e.g. ``(1, 28, 28)``.
        generator: source of the Gaussian initialisation (the only randomness).
        settings: optimisation settings (defaults: :class:`ZSDGSettings`).

    Raises:
        IncompatibleModelError: if the model has no BatchNorm layers with running statistics.
    """
    settings = settings or ZSDGSettings()
    bn_layers(model)  # raises for a model without BN statistics
    labels = torch.tensor(list(classes), dtype=torch.long).repeat_interleave(per_class)
    param = next(model.parameters())
    if labels.numel() == 0:
        return Synthetic(param.new_zeros(0, *input_shape), labels.to(param.device))
    if labels.numel() == 1:
        raise ConfigError("ZSDG needs at least 2 samples in a batch (batch variance of one sample is 0)")
    labels = labels.to(param.device)
    noise = torch.randn(labels.numel(), *input_shape, generator=generator) * settings.init_std
    x = noise.to(device=param.device, dtype=param.dtype).requires_grad_(True)
    optimizer = torch.optim.Adam([x], lr=settings.lr)
    work = channels_last_copy(model)
    was_training = model.training
    work.eval()
    # The last iteration's loss parts, read once after the loop (no host-device sync per step on a GPU).
    last: dict[str, Tensor] = {}
    try:
        with BNStatLoss(work, settings.bn_norm) as bn_loss:
            for _ in range(settings.iterations):
                bn_loss.terms.clear()
                ce = F.cross_entropy(work(x), labels)
                bn = bn_loss.value
                tv = total_variation(x) if settings.tv_weight > 0 else x.new_zeros(())
                loss = settings.bn_weight * bn + settings.ce_weight * ce + settings.tv_weight * tv
                (grad,) = torch.autograd.grad(loss, [x])
                x.grad = grad
                optimizer.step()
                last = {"bn": bn.detach(), "ce": ce.detach(), "tv": tv.detach()}
        logs = {key: float(value) for key, value in last.items()}
        with torch.no_grad():
            logs["acc"] = float((work(x).argmax(dim=1) == labels).float().mean())
    finally:
        model.train(was_training)
    return Synthetic(x.detach(), labels, logs)


@torch.no_grad()
def class_accuracy(
    classifier: nn.Module, x: Tensor, y: Tensor, *, num_classes: int, batch_size: int = 512
) -> Tensor:
    """Accuracy of ``classifier`` on ``(x, y)`` per class, shape ``[num_classes]`` (NaN for absent classes).

    The paper's quality check of synthetic data (Section 4.4): an independently trained "oracle" classifier
    labels the generated samples; its per-class accuracy says how recognisable each class's samples are.
    """
    was_training = classifier.training
    classifier.eval()
    try:
        # Hits are counted on y's device and read once (whole numbers in float64: exact in any order).
        correct = torch.zeros(num_classes, dtype=torch.float64, device=y.device)
        for start in range(0, y.shape[0], batch_size):
            pred = classifier(x[start : start + batch_size]).argmax(dim=1)
            target = y[start : start + batch_size]
            correct.index_add_(0, target, (pred == target.to(pred.device)).to(correct))
    finally:
        classifier.train(was_training)
    correct = correct.cpu()
    counts = torch.bincount(y.cpu(), minlength=num_classes).to(torch.float64)
    return torch.where(counts > 0, correct / counts.clamp(min=1), torch.full_like(counts, math.nan))
