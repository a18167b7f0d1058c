"""Synthetic Gaussian class blobs of any shape, for fast tests and smoke runs (no files needed).

Each class ``c`` has a mean vector ``mu_c ~ N(0, separation**2 / D)`` per entry (``D`` = number of entries of
``shape``), so the expected distance between two class means is about ``separation * sqrt(2)`` in units of
the noise std; a sample is ``mu_c + N(0, 1)`` reshaped to ``shape``. Classes are balanced (label ``i % C``,
then shuffled). Everything derives from ``seed`` through one ``torch.Generator``: the same options always give
bit-identical tensors. Defaults: 10 classes, ``[1, 8, 8]``, 600 train / 200 test, separation 3.0.
Not normalised (``mean``/``std`` are None). License: generated data, no restrictions.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fedaug.data.base import Dataset, LoadContext, option_key
from fedaug.errors import ConfigError
from fedaug.registry import register
from fedaug.validation import check_int, check_number


def _check_shape(shape: Sequence[int] | int) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, int) else tuple(shape) if isinstance(shape, list | tuple) else None
    if not dims or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
        raise ConfigError(
            f"option 'shape' of dataset 'synthetic' must be a list of positive integers; got {shape!r}"
        )
    return dims


def _check_options(
    num_classes: int, shape: Sequence[int], num_train: int, num_test: int, separation: float, seed: int
) -> tuple[int, ...]:
    check_int(option_key("synthetic", "num_classes"), num_classes, 2)
    check_int(option_key("synthetic", "num_train"), num_train, 1)
    check_int(option_key("synthetic", "num_test"), num_test, 1)
    check_number(option_key("synthetic", "separation"), separation)
    check_int(option_key("synthetic", "seed"), seed, 0)
    return _check_shape(shape)


def _samples(
    means: torch.Tensor, count: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    num_classes = means.shape[0]
    labels = torch.arange(count) % num_classes
    labels = labels[torch.randperm(count, generator=generator)]
    noise = torch.randn(count, means.shape[1], generator=generator)
    return means[labels] + noise, labels


@register(
    "dataset",
    "synthetic",
    shape="any ([1,8,8])",
    size="600 / 200",
    classes="10 (any)",
    source="generated Gaussian class blobs",
    license="none (generated)",
)
def load_synthetic(
    ctx: LoadContext,
    *,
    num_classes: int = 10,
    shape: Sequence[int] = (1, 8, 8),
    num_train: int = 600,
    num_test: int = 200,
    separation: float = 3.0,
    seed: int = 0,
) -> Dataset:
    """Generates Gaussian blobs ``[N, *shape]`` (see the module docstring); ``ctx`` is unused.

    Args:
        ctx: unused (nothing is read from disk).
        num_classes: number of classes (>= 2).
        shape: per-sample shape, e.g. ``[1, 8, 8]`` or ``[20]``.
        num_train: training samples.
        num_test: test samples.
        separation: distance scale between class means, in noise standard deviations.
        seed: seed of the generator.
    """
    del ctx
    dims = _check_options(num_classes, shape, num_train, num_test, separation, seed)
    generator = torch.Generator().manual_seed(seed)
    size = int(torch.tensor(dims).prod())
    means = torch.randn(num_classes, size, generator=generator) * (separation / size**0.5)
    x_train, y_train = _samples(means, num_train, generator)
    x_test, y_test = _samples(means, num_test, generator)
    return Dataset(
        name="synthetic",
        x_train=x_train.reshape(num_train, *dims),
        y_train=y_train,
        x_test=x_test.reshape(num_test, *dims),
        y_test=y_test,
        num_classes=num_classes,
        class_names=[f"class_{i}" for i in range(num_classes)],
        input_shape=dims,
        source=f"synthetic Gaussian blobs (seed {seed}, separation {separation}, shape {list(dims)})",
    )
