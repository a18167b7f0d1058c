"""The attacks see a ``method.share_dp`` run's shares as its clients sent them: activations clipped plus noise
of std sigma clip, FedMix averages of clipped inputs plus noise of std sigma clip / g."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from fedaug.attacks.target import Target
from fedaug.models import build_model
from fedaug.privacy.gaussian import GaussianShare, clip_rows, gaussian_noise

CLIP, SIGMA = 0.5, 2.0
MECH = GaussianShare(clip=CLIP, noise_multiplier=SIGMA, delta=1e-5, epsilon=math.inf, max_releases=1)


def _target(shared: str, model: Any, layer: int | None, group: int, dp: GaussianShare | None) -> Target:
    noise = torch.Generator().manual_seed(7) if dp is not None else None
    return Target("t", Path("."), 1, "flea", shared, None, model, layer, group, {}, dp=dp, noise=noise)  # type: ignore[arg-type]


def test_observed_activations_are_clipped_plus_the_mechanisms_noise() -> None:
    model = build_model("lenet5", num_classes=10, input_shape=(1, 28, 28)).eval()
    x = 3 * torch.randn(6, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    plain = _target("features", model, 1, 1, None).observe(x)
    private = _target("features", model, 1, 1, MECH).observe(x)
    noise = gaussian_noise(tuple(plain.shape), SIGMA * CLIP, torch.Generator().manual_seed(7), plain)
    torch.testing.assert_close(private - noise, clip_rows(plain, CLIP))
    assert float(plain.flatten(1).norm(dim=1).min()) > CLIP  # every row was clipped


def test_observed_averages_are_of_clipped_inputs_plus_noise_scaled_to_one_inputs_share() -> None:
    groups = 3 * torch.randn(4, 5, 1, 6, 6, generator=torch.Generator().manual_seed(1))
    assert torch.equal(_target("averages", None, None, 5, None).average(groups), groups.mean(dim=1))
    private = _target("averages", None, None, 5, MECH).average(groups)
    clipped = clip_rows(groups.flatten(0, 1), CLIP).view(groups.shape).mean(dim=1)
    noise = gaussian_noise(tuple(clipped.shape), SIGMA * CLIP / 5, torch.Generator().manual_seed(7), clipped)
    torch.testing.assert_close(private, clipped + noise)
