"""The Gaussian mechanism on what a method shares from data: per-sample L2 clipping, Gaussian noise, and the
privacy spent, accounted by Google's ``dp-accounting`` (its RDP accountant; an optional dependency,
``pip install 'fedaug[privacy]'``, imported only when a config asks for differential privacy).

What is released and its sensitivity. A method shares rows computed from its samples: FLea one row per sample
(the activations at the split layer, flattened), FedMix one row per group of g samples (their average input).
Each sample's contribution is clipped to L2 norm ``clip`` (FedMix: each input is clipped before averaging, so
it moves the average by at most ``clip / g``), and every released row gets independent Gaussian noise of
standard deviation ``noise_multiplier`` times that per-sample bound: ``noise_multiplier * clip`` for FLea's
rows, ``noise_multiplier * clip / g`` for FedMix's averages.

The neighbouring relation is replace-one: two datasets differ in the value of one sample (which samples are
drawn for sharing does not depend on their values, so a sample not released in a share phase spends
nothing). Replacing a sample moves its clipped row by up to ``2 clip`` (FedMix's average: ``2 clip / g``), so
each release is the Gaussian mechanism with noise multiplier ``noise_multiplier / 2`` with respect to its
sensitivity, and the accountant composes one such event per release of a sample (sampling rate 1: no
amplification by the random choice of the shared subset or of the round's clients is claimed). The epsilon
a run reports is that of its most-released sample at ``delta``.

The guarantee covers the shared rows only, conditioned on the models they were computed with: nothing about
the model updates a client sends (not protected), nor the labels shared with the rows (sent in the clear).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from fedaug import validation
from fedaug.errors import ConfigError

INSTALL_HINT = "pip install 'fedaug[privacy]'"
"""What a config that asks for differential privacy without the accountant installed is told to run."""

SENSITIVITY_FACTOR = 2.0
"""Replace-one sensitivity of a clipped row in units of the per-sample clip: ``||c(a) - c(b)|| <= 2 clip``."""

MAX_RELEASES = 1_000_000
"""The most releases of one sample the budget is searched over (far more than any run has rounds)."""


@dataclass(frozen=True)
class ShareDPConfig:
    """``method.share_dp``: differential privacy for what the method shares from data (off by default).

    Attributes:
        epsilon: the budget per sample at ``delta`` (``.inf``: no budget). With ``noise_multiplier`` unset a
            finite epsilon switches the mechanism on and calibrates the noise so that ``releases`` releases of
            a sample spend it; a sample whose next release would exceed it is no longer shared.
        delta: the delta of the (epsilon, delta) guarantee.
        clip: the L2 bound on each sample's shared row (FLea: its flattened activations; FedMix: its
            flattened input, before averaging).
        noise_multiplier: sigma; the noise's std is sigma times the per-sample clip of the released row.
            Set, it switches the mechanism on (with ``epsilon: .inf`` the spent epsilon is only reported).
        releases: the releases of one sample the noise is calibrated for when only ``epsilon`` is given.
    """

    epsilon: float = math.inf
    delta: float = 1e-5
    clip: float = 1.0
    noise_multiplier: float | None = None
    releases: int = 1

    def __post_init__(self) -> None:
        if self.epsilon != math.inf:  # .inf: no budget
            validation.check_number("method.share_dp.epsilon", self.epsilon, 0, math.inf, low_open=True)
        validation.check_number("method.share_dp.delta", self.delta, 0, 1, low_open=True, high_open=True)
        validation.check_number("method.share_dp.clip", self.clip, 0, math.inf, low_open=True)
        if self.noise_multiplier is not None:
            validation.check_number(
                "method.share_dp.noise_multiplier", self.noise_multiplier, 0, math.inf, low_open=True
            )
        validation.check_int("method.share_dp.releases", self.releases, 1)

    @property
    def enabled(self) -> bool:
        """Whether the mechanism runs: a noise multiplier or a finite epsilon is set."""
        return self.noise_multiplier is not None or not math.isinf(self.epsilon)


@dataclass(frozen=True)
class GaussianShare:
    """The resolved mechanism of a run: the noise, the budget and how many releases of a sample it allows.

    Attributes:
        clip: the per-sample L2 bound.
        noise_multiplier: sigma (noise std = sigma * the per-sample clip of the released row).
        delta: the delta epsilon is reported at.
        epsilon: the budget (inf: none).
        max_releases: the releases of one sample the budget allows (``MAX_RELEASES`` when unbounded).
    """

    clip: float
    noise_multiplier: float
    delta: float
    epsilon: float
    max_releases: int

    def spent(self, releases: int) -> float:
        """Epsilon at ``delta`` after ``releases`` releases of one sample (0 for none)."""
        return gaussian_epsilon(self.noise_multiplier, releases, self.delta)


def accountant() -> Any:
    """The ``dp_accounting`` module, or a one-line ConfigError saying how to install it."""
    try:
        import dp_accounting
    except ImportError:
        raise ConfigError(
            f"method.share_dp needs Google's dp-accounting, which is not installed: {INSTALL_HINT}"
        ) from None
    return dp_accounting


@functools.lru_cache(maxsize=4096)
def gaussian_epsilon(noise_multiplier: float, releases: int, delta: float) -> float:
    """Epsilon at ``delta`` of ``releases`` releases of one sample's clipped row with noise std
    ``noise_multiplier`` times its clip: the RDP accountant's composition of ``releases`` Gaussian
    mechanisms of noise multiplier ``noise_multiplier / SENSITIVITY_FACTOR`` (replace-one sensitivity)."""
    if releases == 0:
        return 0.0
    dpa = accountant()
    rdp = dpa.rdp.RdpAccountant()
    rdp.compose(dpa.GaussianDpEvent(noise_multiplier / SENSITIVITY_FACTOR), releases)
    return float(rdp.get_epsilon(delta))


def calibrate(epsilon: float, delta: float, releases: int) -> float:
    """The smallest noise multiplier (to 1e-6, rounded up) whose ``releases`` releases spend at most
    ``epsilon`` at ``delta`` (the accountant's own calibration)."""
    dpa = accountant()

    def event(sigma: float) -> Any:
        return dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(sigma / SENSITIVITY_FACTOR), releases)

    sigma = float(dpa.calibrate_dp_mechanism(dpa.rdp.RdpAccountant, event, epsilon, delta, tol=1e-6))
    sigma += 2e-6  # within tol of the optimum, on the private side
    while gaussian_epsilon(sigma, releases, delta) > epsilon:
        sigma *= 1 + 1e-6
    return sigma


def max_releases(noise_multiplier: float, epsilon: float, delta: float, limit: int = MAX_RELEASES) -> int:
    """The most releases of one sample whose epsilon stays within ``epsilon`` (``limit`` if unbounded)."""
    if math.isinf(epsilon):
        return limit
    if gaussian_epsilon(noise_multiplier, 1, delta) > epsilon:
        return 0
    low, high = 1, 2
    while high < limit and gaussian_epsilon(noise_multiplier, high, delta) <= epsilon:
        low, high = high, min(2 * high, limit)
    if gaussian_epsilon(noise_multiplier, high, delta) <= epsilon:
        return high
    while high - low > 1:  # eps(low) <= epsilon < eps(high)
        mid = (low + high) // 2
        low, high = (mid, high) if gaussian_epsilon(noise_multiplier, mid, delta) <= epsilon else (low, mid)
    return low


def resolve(config: ShareDPConfig) -> GaussianShare | None:
    """The run's mechanism from ``method.share_dp`` (None: off). Raises ConfigError, with the install
    line, when the accountant is missing: before the run, since methods are built before any file is
    written."""
    if not config.enabled:
        return None
    accountant()
    sigma = config.noise_multiplier
    if sigma is None:
        sigma = calibrate(config.epsilon, config.delta, config.releases)
    limit = max_releases(sigma, config.epsilon, config.delta)
    return GaussianShare(config.clip, sigma, config.delta, config.epsilon, limit)


CLIP_MARGIN = 2.0**-22
"""A row longer than the clip is scaled to ``clip (1 - CLIP_MARGIN)`` in float64: rounding it back to float32
(at most 2^-24 relative per entry) leaves its norm within the clip."""


def clip_rows(x: Tensor, clip: float) -> Tensor:
    """Every row of ``x`` (its first dimension; the rest flattened) scaled to L2 norm at most ``clip``; rows
    within the clip are returned unchanged."""
    if x.numel() == 0:
        return x
    rows = x.reshape(x.shape[0], -1).double()
    norms = torch.linalg.vector_norm(rows, dim=1, keepdim=True)
    scale = torch.where(norms > clip, clip * (1 - CLIP_MARGIN) / norms, torch.ones_like(norms))
    return (rows * scale).to(x.dtype).reshape(x.shape)


def gaussian_noise(shape: tuple[int, ...], std: float, generator: torch.Generator, like: Tensor) -> Tensor:
    """Noise of std ``std``, drawn on the CPU from ``generator`` (the same on every device), as ``like``."""
    noise = torch.randn(shape, generator=generator, dtype=torch.float32)
    return (noise * std).to(device=like.device, dtype=like.dtype)
