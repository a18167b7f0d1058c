"""The attacker's estimates: the inputs' range, and the shrinkage of FedMix's noised averages against the
closed form of the linear minimum-MSE estimate on data with a known mechanism."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from fedaug.attacks.estimate import (
    ESTIMATES,
    clamp,
    closed_form_mse,
    fit_shrinkage,
    member_mse,
    value_range,
)
from fedaug.attacks.reconstruct import attack_direct
from fedaug.attacks.target import Target
from fedaug.data.datasets import Dataset
from fedaug.privacy.gaussian import GaussianShare

SHAPE = (1, 4, 4)
GROUP = 4
CLIP = 100.0  # far above every input's norm (about 5): nothing is clipped, the closed form holds
NOISE_STD = 1.0  # per entry of an average: sigma clip / g
SIGNAL_STD = torch.linspace(0.5, 1.5, 16).view(SHAPE)


def _gaussian_dataset(num_train: int, num_test: int, modality: str = "signal") -> Dataset:
    """Independent features 0.3 + SIGNAL_STD * N(0, 1) (not normalised), two labels."""
    gen = torch.Generator().manual_seed(11)
    x = 0.3 + SIGNAL_STD * torch.randn(num_train + num_test, *SHAPE, generator=gen)
    y = torch.arange(num_train + num_test) % 2
    return Dataset(
        "gauss",
        x[:num_train],
        y[:num_train],
        x[num_train:],
        y[num_train:],
        2,
        ["a", "b"],
        SHAPE,
        "test",
        modality=modality,
    )


def _noised_target(dataset: Dataset, noise_std: float = NOISE_STD) -> Target:
    mech = GaussianShare(
        clip=CLIP, noise_multiplier=noise_std * GROUP / CLIP, delta=1e-5, epsilon=math.inf, max_releases=1
    )
    noise = torch.Generator().manual_seed(5)
    return Target(
        "t", Path("."), 1, "fedmix", "averages", dataset, None, None, GROUP, {}, dp=mech, noise=noise
    )


def test_shrinkage_beats_the_noised_average_and_matches_the_closed_form() -> None:
    # Prepare: 4,000 attacker inputs, 40,000 attacked ones (10,000 groups of 4), noise std 1 per entry
    dataset = _gaussian_dataset(4000, 40000)
    target = _noised_target(dataset)
    # Execute
    rows, _ = attack_direct(
        target,
        dataset.x_test,
        dataset.y_test,
        dataset.x_train,
        0,
        attacker=(dataset.x_train, dataset.y_train),
    )
    # Assert: the closed form is 1.024 (shrunk) against 1.821 (plain: the mean signal variance 1 + 1/12 *
    # 17/15, times 3/4, plus the noise's 1); 2% covers the sampling error of 160,000 entries and of the fitted
    # slopes (a slope of 1 would miss the shrunk value by 78%)
    shrunk, plain = closed_form_mse(SIGNAL_STD**2, torch.tensor(NOISE_STD**2), GROUP)
    assert plain == pytest.approx((1 + 17 / 180) * 3 / 4 + 1, rel=1e-6)
    assert shrunk == pytest.approx(1.02422, abs=1e-4)
    # the noised averages' own MSE is what the attack reported before its estimates (commit c0e5fc2): the
    # attacker's fit draws its noise from a stream of its own, the targets' noise is unchanged
    assert [row.plain_mse for row in rows] == [1.823426604270935, 1.8276841640472412]
    for row in rows:
        assert row.estimates is not None and set(row.estimates) == set(ESTIMATES)
        assert row.plain_mse == pytest.approx(plain, rel=0.02)
        assert row.estimates["average"] == row.plain_mse
        assert row.estimates["shrunk"] == pytest.approx(shrunk, rel=0.02)
        assert row.estimate in ("shrunk", "shrunk, clamped") and row.mse == row.estimates[row.estimate]
        assert row.mse < 0.6 * row.plain_mse


def test_without_noise_the_fitted_shrinkage_is_the_identity() -> None:
    members = torch.rand(500, 10, *SHAPE, generator=torch.Generator().manual_seed(2))
    shrink = fit_shrinkage(members, members.mean(dim=1))
    torch.testing.assert_close(shrink.slope, torch.ones(SHAPE), atol=1e-5, rtol=0)
    torch.testing.assert_close(shrink.intercept, torch.zeros(SHAPE), atol=1e-5, rtol=0)
    constant = fit_shrinkage(members, torch.zeros(500, *SHAPE))  # an average that never varies
    assert torch.equal(constant.slope, torch.zeros(SHAPE))
    torch.testing.assert_close(constant.intercept, members.mean(dim=(0, 1)))


def test_images_are_clamped_to_0_1_and_other_data_to_each_channels_range() -> None:
    images = torch.rand(50, 1, 4, 4, generator=torch.Generator().manual_seed(3))
    low, high = value_range(_gaussian_dataset(4, 4, modality="image"), images)
    assert (float(low), float(high)) == (0.0, 1.0)
    noisy = images + torch.randn(images.shape, generator=torch.Generator().manual_seed(4))
    clamped = clamp(noisy, (low, high))
    assert float(clamped.min()) == 0.0 and float(clamped.max()) == 1.0
    assert member_mse(clamped, images[:, None]) < member_mse(noisy, images[:, None])  # never worse, here less
    torch.testing.assert_close(clamp(images, (low, high)), images, atol=0, rtol=0)  # in range: untouched
    # a signal [B, 1, time, channels] normalised per channel (norm_axis 2): each channel's own range
    windows = torch.arange(2 * 3 * 2, dtype=torch.float32).view(2, 1, 3, 2)
    labels = torch.zeros(2, dtype=torch.long)
    har = Dataset("w", windows, labels, windows, labels, 1, ["a"], (1, 3, 2), "t",
                  mean=(0.0, 0.0), std=(1.0, 1.0), norm_axis=2, modality="signal")  # fmt: skip
    low, high = value_range(har, windows)
    assert low.flatten().tolist() == [0.0, 1.0] and high.flatten().tolist() == [10.0, 11.0]
    assert clamp(torch.full((1, 1, 3, 2), 20.0), (low, high))[0, 0, 0].tolist() == [10.0, 11.0]
