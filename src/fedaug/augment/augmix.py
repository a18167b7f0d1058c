"""AugMix on batched tensors: per-image augmentation chains mixed with the original.

Source: "AugMix: A Simple Data Processing Method to Improve Robustness and Uncertainty" (Hendrycks, Mu,
Cubuk, Zoph, Gilmer and Lakshminarayanan, ICLR 2020, arXiv:1912.02781), as used by "Fed-AugMix: Balancing
Privacy and Utility via Data Augmentation" (Algorithm 2). Reference code: google-research/augmix
(``augment_and_mix``, ``augmentations.py``).

For every image and every view: ``width`` chains, each of ``depth`` operations (uniform in 1..3 when
``depth = -1``) drawn uniformly from :data:`fedaug.augment.ops.OPS`; each operation draws its own level
``~ U(0.1, severity)`` and a random sign, and its magnitude is the reference's ``level / 10`` of the op's
maximum (rotate 30 degrees, shear 0.3, translate a third of the image side, posterize down to 4 - 4 bits
removed, solarize threshold down to 0). The chains are mixed with Dirichlet(1) weights and the mix is blended
with the original: ``x_aug = (1 - m) x + m sum_i w_i chain_i(x)``, ``m ~ Beta(1, 1)``.

Inputs may be normalised (``(x - mean) / std`` per channel): they are de-normalised to [0, 1] (clamped), every
operation runs in [0, 1], and the views are normalised again. Randomness comes only from the
``torch.Generator`` passed in, and all draws of a batch are made at once (:meth:`AugMix.sample`) before any
pixel is touched (:meth:`AugMix.apply`), so an attacker can fix a draw and differentiate through it. The
draws are made on the CPU (the run's generators are CPU ones), so a batch gets the same operations on every
device; only the pixel work runs on the images' device.

Severity 0 is the identity (no draw at all). The reference code at severity 0 would still apply
autocontrast/equalize and tiny shears; the Fed-AugMix paper's "no protection" rows are plain training.
Mixing weights are Dirichlet(1) / Beta(1, 1) as in the paper and the reference default (alpha = 1);
Dirichlet(1) is drawn as normalised Exp(1) samples and Beta(1, 1) as U(0, 1), so that a ``torch.Generator``
drives everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from fedaug.augment.ops import OPS, apply_op
from fedaug.errors import ConfigError
from fedaug.runtime.device import host_to_device
from fedaug.validation import check_int, check_number

MAX_DEPTH = 3
"""The longest chain (``depth = -1`` draws 1..3 operations, as in the reference code)."""


@dataclass(frozen=True)
class AugMixDraw:
    """All random choices of one AugMix call on a batch (V views, B images, W chains, D = max depth).

    Attributes:
        ops: ``[V, B, W, D]`` operation codes (indices into ``OPS``); -1 where a chain is shorter than D.
        params: ``[V, B, W, D]`` each operation's parameter (degrees, shear factor, pixels, bits, threshold).
        chain_weights: ``[V, B, W]`` Dirichlet(1) mixing weights of the chains (rows sum to 1).
        blend: ``[V, B]`` weight m of the mixed chains against the original.
    """

    ops: Tensor
    params: Tensor
    chain_weights: Tensor
    blend: Tensor


def op_parameters(op: Tensor, level: Tensor, sign: Tensor, height: int, width: int) -> Tensor:
    """The reference code's magnitude of every op from its level in (0, 10] and a sign in {-1, 1}.

    ``int_parameter(level, max) = floor(level * max / 10)``, ``float_parameter = level * max / 10``:
    rotate ``int(30)`` degrees, shear ``float(0.3)``, translate ``int(side / 3)`` pixels (signed);
    posterize keeps ``4 - int(4)`` bits (at least 1, as Pillow requires), solarize inverts levels
    ``>= 256 - int(256)``; autocontrast and equalize take no parameter.
    """

    def scaled(maximum: float, as_int: bool) -> Tensor:
        value = level * maximum / 10
        return torch.floor(value) if as_int else value

    by_op = {
        "posterize": (4 - scaled(4, True)).clamp_min(1),
        "rotate": scaled(30, True) * sign,
        "solarize": 256 - scaled(256, True),
        "shear_x": scaled(0.3, False) * sign,
        "shear_y": scaled(0.3, False) * sign,
        "translate_x": scaled(width / 3, True) * sign,
        "translate_y": scaled(height / 3, True) * sign,
    }
    params = torch.zeros_like(level)
    for name, value in by_op.items():
        params = torch.where(op == OPS.index(name), value, params)
    return params


class AugMix:
    """AugMix views of normalised image batches ``[B, C, H, W]``.

    Args:
        severity: 0..10; 0 returns the input unchanged (reference default 3).
        width: chains per view (paper and reference: 3).
        depth: operations per chain; -1 draws 1..3 per chain (paper and reference).
        mean: per-channel normalisation mean of the inputs (None: inputs are already in [0, 1]).
        std: per-channel normalisation std, same length as ``mean``.

    Raises:
        ConfigError: for a severity outside 0..10, width < 1, depth outside -1 or 1..3, or mean/std of
            different lengths or with a std <= 0.
    """

    def __init__(
        self,
        *,
        severity: float = 3.0,
        width: int = 3,
        depth: int = -1,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
    ) -> None:
        check_number("augmix severity", severity, 0, 10)
        check_int("augmix width", width, 1)
        if depth != -1 and not 1 <= depth <= MAX_DEPTH:
            raise ConfigError(f"augmix depth must be -1 (random 1..3) or 1..{MAX_DEPTH}, got {depth}")
        if (mean is None) != (std is None) or len(mean or ()) != len(std or ()):
            raise ConfigError(
                f"augmix mean and std must both be given with one value per channel, got {mean}, {std}"
            )
        if std is not None and min(std) <= 0:
            raise ConfigError(f"augmix std must be > 0, got {std}")
        self.severity = float(severity)
        self.width = width
        self.depth = depth
        self.mean = None if mean is None else tuple(float(m) for m in mean)
        self.std = None if std is None else tuple(float(s) for s in std)

    @property
    def is_identity(self) -> bool:
        return self.severity == 0

    def sample(
        self, num_views: int, batch: int, height: int, width: int, generator: torch.Generator
    ) -> AugMixDraw:
        """Draws the chains, levels, signs and mixing weights of ``num_views`` views of ``batch`` images, on
        the CPU with ``generator`` (a CPU generator)."""
        shape = (num_views, batch, self.width, MAX_DEPTH)
        ops = torch.randint(len(OPS), shape, generator=generator)
        depth = (
            torch.randint(1, MAX_DEPTH + 1, shape[:3], generator=generator)
            if self.depth == -1
            else torch.full(shape[:3], self.depth)
        )
        ops = torch.where(torch.arange(MAX_DEPTH) < depth.unsqueeze(-1), ops, -1)
        level = 0.1 + (self.severity - 0.1) * torch.rand(shape, generator=generator)  # U(0.1, severity)
        sign = torch.where(torch.rand(shape, generator=generator) < 0.5, -1.0, 1.0)
        exponential = -torch.log1p(-torch.rand(shape[:3], generator=generator))  # Exp(1)
        return AugMixDraw(
            ops=ops,
            params=op_parameters(ops, level, sign, height, width),
            chain_weights=exponential / exponential.sum(-1, keepdim=True),  # Dirichlet(1)
            blend=torch.rand(shape[:2], generator=generator),  # Beta(1, 1)
        )

    def to_unit(self, x: Tensor) -> Tensor:
        """De-normalised inputs, clamped to [0, 1]."""
        if self.mean is None or self.std is None:
            return x.clamp(0, 1)
        mean, std = self._stats(x)
        return (x * std + mean).clamp(0, 1)

    def from_unit(self, x: Tensor) -> Tensor:
        """Normalised again with the same statistics."""
        if self.mean is None or self.std is None:
            return x
        mean, std = self._stats(x)
        return (x - mean) / std

    def _stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
        assert self.mean is not None and self.std is not None
        view = (1, -1, 1, 1)
        mean = host_to_device(torch.tensor(self.mean, dtype=x.dtype), x.device).view(view)
        std = host_to_device(torch.tensor(self.std, dtype=x.dtype), x.device).view(view)
        return mean, std

    def apply(self, x: Tensor, draw: AugMixDraw) -> Tensor:
        """The views ``[V, B, C, H, W]`` of normalised ``x [B, C, H, W]`` under ``draw`` (differentiable).

        ``draw`` may live on the CPU (as :meth:`sample` makes it) while ``x`` is on a GPU: the operation codes
        stay where they are (rows are grouped there, :func:`~fedaug.augment.ops.apply_op`), the parameters and
        weights are moved to ``x``'s device once, without the host waiting
        (:func:`~fedaug.runtime.device.host_to_device`).
        """
        num_views, batch, width, depth = draw.ops.shape
        params = host_to_device(draw.params, x.device)
        unit = self.to_unit(x)
        rows = unit.unsqueeze(0).unsqueeze(2).expand(num_views, -1, width, -1, -1, -1).flatten(0, 2)
        for step in range(depth):
            rows = apply_op(rows, draw.ops[..., step].flatten(), params[..., step].flatten())
        chains = rows.view(num_views, batch, width, *x.shape[1:])
        chain_weights = host_to_device(draw.chain_weights, x.device, dtype=x.dtype)
        weights = chain_weights.view(num_views, batch, width, *([1] * (x.dim() - 1)))
        mixed = (weights * chains).sum(dim=2)
        blend = host_to_device(draw.blend, x.device, dtype=x.dtype)
        blend = blend.view(num_views, batch, *([1] * (x.dim() - 1)))
        return self.from_unit((1 - blend) * unit + blend * mixed)

    def views(self, x: Tensor, generator: torch.Generator, num_views: int = 2) -> Tensor:
        """``num_views`` independent AugMix views ``[V, B, C, H, W]`` of normalised images ``x``."""
        if x.dim() != 4:
            raise ConfigError(f"augmix needs image batches [B, C, H, W], got shape {tuple(x.shape)}")
        if self.is_identity:
            return x.unsqueeze(0).expand(num_views, *x.shape).clone()
        draw = self.sample(num_views, x.shape[0], x.shape[2], x.shape[3], generator)
        return self.apply(x, draw)
