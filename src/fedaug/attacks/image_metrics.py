"""Per-image reconstruction metrics: MSE, PSNR and SSIM between images in [0, 1].

SSIM: Wang, Bovik, Sheikh and Simoncelli, "Image quality assessment: from error visibility to structural
similarity", IEEE TIP 2004. An 11x11 Gaussian window with sigma 1.5, constants ``C1 = (0.01 L)^2`` and
``C2 = (0.03 L)^2`` (L = 1, the data range), the SSIM map over the window positions fully inside the image
(the paper's 'valid' filtering, no padding), averaged per channel and then over channels. Every function
returns one value per image (``[N]``); callers average over a batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

SSIM_WINDOW = 11
SSIM_SIGMA = 1.5


def mse(a: Tensor, b: Tensor) -> Tensor:
    """Mean squared error of each image pair ``[N, C, H, W]`` -> ``[N]``."""
    return (a - b).pow(2).flatten(1).mean(dim=1)


def psnr(a: Tensor, b: Tensor, data_range: float = 1.0) -> Tensor:
    """Peak signal-to-noise ratio in dB, ``10 log10(range^2 / MSE)``; identical images give +inf."""
    return 10 * torch.log10(data_range**2 / mse(a, b))


def gaussian_window(size: int = SSIM_WINDOW, sigma: float = SSIM_SIGMA) -> Tensor:
    """A normalised 2-D Gaussian window ``[size, size]``."""
    coords = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    g = torch.exp(-(coords**2) / (2 * sigma**2))
    g = g / g.sum()
    return torch.outer(g, g)


def ssim(a: Tensor, b: Tensor, data_range: float = 1.0, window_size: int = SSIM_WINDOW) -> Tensor:
    """Mean SSIM of each image pair ``[N, C, H, W]`` -> ``[N]`` (Gaussian window, sigma 1.5).

    Raises:
        ValueError: for images smaller than the window.
    """
    if min(a.shape[-2:]) < window_size:
        raise ValueError(
            f"SSIM needs images of at least {window_size}x{window_size}, got {tuple(a.shape[-2:])}"
        )
    channels = a.shape[1]
    window = gaussian_window(window_size).to(a.dtype).to(a.device)
    weight = window.expand(channels, 1, window_size, window_size)

    def blur(x: Tensor) -> Tensor:
        return F.conv2d(x, weight, groups=channels)

    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    mu_a, mu_b = blur(a), blur(b)
    var_a = blur(a * a) - mu_a**2
    var_b = blur(b * b) - mu_b**2
    cov = blur(a * b) - mu_a * mu_b
    ssim_map = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2))
    return ssim_map.flatten(2).mean(dim=2).mean(dim=1)
