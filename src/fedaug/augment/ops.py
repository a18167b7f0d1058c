"""AugMix's AutoAugment operations on batched image tensors in [0, 1], one magnitude per image.

Source: "AugMix: A Simple Data Processing Method to Improve Robustness and Uncertainty" (Hendrycks, Mu,
Cubuk, Zoph, Gilmer and Lakshminarayanan, ICLR 2020, arXiv:1912.02781); the reference code
(google-research/augmix, ``augmentations.py``) applies these operations to PIL images one at a time. Here
every operation takes ``x [N, C, H, W]`` in [0, 1] and a parameter per row, so a whole batch of chains is
transformed at once:

=============  ==============================================================  =========================
op             what it does (PIL ``ImageOps`` equivalent)                      parameter (per row)
=============  ==============================================================  =========================
autocontrast   stretch each channel to [0, 1] (min -> 0, max -> 1)              none
equalize       histogram equalisation per channel (PIL's 256-bin algorithm)     none
posterize      keep the top ``bits`` bits of each 8-bit value                   bits (1..8)
solarize       invert values at or above ``threshold`` (8-bit levels)           threshold (0..256)
rotate         rotate about the centre, counter-clockwise, bilinear             degrees
shear_x/y      affine shear about the top-left corner, bilinear                 shear factor
translate_x/y  shift by a number of pixels, bilinear                            pixels
=============  ==============================================================  =========================

Pixels moved in from outside the image are 0 (PIL's default fill). The histogram operations quantise to 256
levels as PIL does; when the input needs a gradient (the inversion attack differentiates through AugMix) they
pass it straight through (the quantisation is treated as the identity in the backward pass), while
autocontrast, solarize and the affine operations are differentiable as they are.

Deviation from reference code: bilinear sampling is ``torch.nn.functional.grid_sample`` on float values, not
PIL's on 8-bit values, so affine results differ from PIL's by rounding (about one 8-bit level) and at the
borders; autocontrast does not truncate to 8-bit levels. The tests compare every operation with PIL.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from fedaug.runtime.device import host_to_device

OPS = (
    "autocontrast",
    "equalize",
    "posterize",
    "rotate",
    "solarize",
    "shear_x",
    "shear_y",
    "translate_x",
    "translate_y",
)
"""AugMix's operation list in the reference order; an op's index here is its code in an AugMix draw."""

AFFINE_OPS = ("rotate", "shear_x", "shear_y", "translate_x", "translate_y")


def _straight_through(x: Tensor, out: Tensor) -> Tensor:
    """``out`` in the forward pass, the identity's gradient in the backward pass (when x needs one)."""
    return x + (out - x).detach() if x.requires_grad else out


def _levels(x: Tensor) -> Tensor:
    """The 8-bit level of every value (``round(255 x)`` clamped to 0..255), as int64."""
    return (x.detach() * 255).round().clamp(0, 255).long()


def autocontrast(x: Tensor) -> Tensor:
    """Maps each channel's minimum to 0 and maximum to 1; a constant channel is left as it is."""
    low = x.amin(dim=(2, 3), keepdim=True)
    high = x.amax(dim=(2, 3), keepdim=True)
    spread = high - low
    stretched = (x - low) / spread.clamp_min(1e-12)
    return torch.where(spread > 0, stretched, x)


def equalize(x: Tensor) -> Tensor:
    """PIL's histogram equalisation, per image and channel, on 256 levels.

    With ``h`` the channel's histogram and ``step = (N - h[last non-empty level]) // 255``, level ``i``
    maps to ``(step // 2 + sum_{j < i} h[j]) // step``; channels with one non-empty level or ``step = 0``
    are unchanged.
    """
    num, channels, height, width = x.shape
    levels = _levels(x).flatten(2)  # [N, C, HW]
    hist = torch.zeros(num, channels, 256, dtype=torch.long, device=x.device)
    hist.scatter_add_(2, levels, torch.ones_like(levels))
    nonempty = hist > 0
    last = 255 - nonempty.flip(-1).long().argmax(dim=-1, keepdim=True)  # highest non-empty level
    step = (height * width - hist.gather(2, last)) // 255  # [N, C, 1]
    below = hist.cumsum(-1) - hist  # pixels strictly below each level
    lut = ((step // 2 + below) // step.clamp_min(1)).clamp(0, 255)
    mapped = lut.gather(2, levels).view_as(x).to(x.dtype) / 255
    unchanged = (nonempty.sum(-1, keepdim=True) <= 1) | (step == 0)
    out = torch.where(unchanged.unsqueeze(-1), x, mapped)
    return _straight_through(x, out)


def posterize(x: Tensor, bits: Tensor) -> Tensor:
    """Keeps the top ``bits[n]`` of the 8 bits of every value of image n (1 <= bits <= 8)."""
    step = torch.pow(2.0, 8 - bits.to(x.dtype)).view(-1, 1, 1, 1)  # PIL: level & ~(2^(8 - bits) - 1)
    out = torch.floor(_levels(x).to(x.dtype) / step) * step / 255
    return _straight_through(x, out)


def solarize(x: Tensor, threshold: Tensor) -> Tensor:
    """Inverts (``1 - x``) the values of image n whose 8-bit level is >= ``threshold[n]``."""
    invert = _levels(x) >= threshold.view(-1, 1, 1, 1)
    return torch.where(invert, 1 - x, x)


def affine_matrices(op: Tensor, param: Tensor, height: int, width: int) -> Tensor:
    """``[N, 2, 3]`` matrices for ``F.affine_grid`` (output -> input, normalised coordinates).

    Args:
        op: ``[N]`` codes (indices into :data:`OPS`), each an affine op.
        param: ``[N]`` degrees (rotate), shear factors (shear_x/y) or pixels (translate_x/y).
        height: image height H.
        width: image width W.

    The matrices reproduce PIL's pixel maps: ``rotate(d)`` samples the input at ``R(-d)`` about the centre;
    ``shear_x(s)`` at ``(x + s y, y)`` from the top-left corner; ``translate_x(t)`` at ``(x + t, y)``.
    """
    num = op.shape[0]
    aspect = height / width
    theta = torch.zeros(num, 2, 3, dtype=param.dtype, device=param.device)
    theta[:, 0, 0] = 1
    theta[:, 1, 1] = 1
    angle = -param * (math.pi / 180)
    cos, sin = torch.cos(angle), torch.sin(angle)
    is_rotate = op == OPS.index("rotate")
    theta[:, 0, 0] = torch.where(is_rotate, cos, theta[:, 0, 0])
    theta[:, 1, 1] = torch.where(is_rotate, cos, theta[:, 1, 1])
    theta[:, 0, 1] = torch.where(is_rotate, sin * aspect, theta[:, 0, 1])
    theta[:, 1, 0] = torch.where(is_rotate, -sin / aspect, theta[:, 1, 0])
    is_shear_x, is_shear_y = op == OPS.index("shear_x"), op == OPS.index("shear_y")
    theta[:, 0, 1] = torch.where(is_shear_x, param * aspect, theta[:, 0, 1])
    theta[:, 0, 2] = torch.where(is_shear_x, param * aspect, theta[:, 0, 2])
    theta[:, 1, 0] = torch.where(is_shear_y, param / aspect, theta[:, 1, 0])
    theta[:, 1, 2] = torch.where(is_shear_y, param / aspect, theta[:, 1, 2])
    theta[:, 0, 2] = torch.where(op == OPS.index("translate_x"), 2 * param / width, theta[:, 0, 2])
    theta[:, 1, 2] = torch.where(op == OPS.index("translate_y"), 2 * param / height, theta[:, 1, 2])
    return theta


def affine(x: Tensor, op: Tensor, param: Tensor) -> Tensor:
    """Applies the affine op ``op[n]`` with ``param[n]`` to image n (bilinear, zero fill), all in one call."""
    theta = affine_matrices(op, param.to(x.dtype), x.shape[2], x.shape[3])
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


_PIXEL_OPS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "autocontrast": lambda x, _: autocontrast(x),
    "equalize": lambda x, _: equalize(x),
    "posterize": posterize,
    "solarize": solarize,
}
"""The non-affine operations as ``fn(images, params)``."""


def apply_op(x: Tensor, op: Tensor, param: Tensor) -> Tensor:
    """Applies op ``op[n]`` (a code of :data:`OPS`, or -1 for none) with ``param[n]`` to image ``x[n]``.

    Rows are grouped by operation: one batched call per operation present (one for all affine ops).
    Gradients flow through to ``x``. ``op`` and ``param`` may live on another device than ``x`` (AugMix
    draws them on the CPU): rows are grouped where ``op`` is (on the CPU without waiting for the GPU), and
    the row indices, codes and parameters are moved to ``x``'s device to transform it there.
    """
    out = x.clone()  # written in place below (index_put_ is differentiable on a fresh clone)
    param = host_to_device(param, x.device)
    affine_codes = torch.tensor([OPS.index(name) for name in AFFINE_OPS], device=op.device)
    rows = torch.isin(op, affine_codes).nonzero().flatten()
    if rows.numel() > 0:
        at = host_to_device(rows, x.device)
        out[at] = affine(x[at], host_to_device(op[rows], x.device), param[at])
    for name, fn in _PIXEL_OPS.items():
        rows = (op == OPS.index(name)).nonzero().flatten()
        if rows.numel() > 0:
            at = host_to_device(rows, x.device)
            out[at] = fn(x[at], param[at])
    return out
