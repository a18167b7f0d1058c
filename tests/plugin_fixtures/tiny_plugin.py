"""A user's plugin as the tests use it: a dataset (4 Gaussian blobs in 6 dimensions) and a model built from an
encoder and a head, registered with fedaug's public decorators."""

from __future__ import annotations

import torch
from torch import Tensor, nn

import fedaug
from fedaug.data.base import Dataset, LoadContext
from fedaug.models.base import SplitModel


@fedaug.register_dataset("plugin_blobs")
def plugin_blobs(ctx: LoadContext, *, num_train: int = 120, seed: int = 0) -> Dataset:
    """4 classes of 6-dimensional Gaussian blobs, ``num_train`` train and 40 test samples."""
    del ctx
    gen = torch.Generator().manual_seed(seed)
    means = torch.randn(4, 6, generator=gen) * 3

    def draw(n: int) -> tuple[Tensor, Tensor]:
        y = torch.arange(n) % 4
        return means[y] + torch.randn(n, 6, generator=gen), y

    (x_train, y_train), (x_test, y_test) = draw(num_train), draw(40)
    return Dataset(
        name="plugin_blobs",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        num_classes=4,
        class_names=list("abcd"),
        input_shape=(6,),
        source="a test plugin",
        modality="signal",
    )


@fedaug.register_model("plugin_net")
def plugin_net(*, num_classes: int, input_shape: tuple[int, ...], width: int = 16) -> SplitModel:
    """Linear-ReLU encoder, linear head."""
    encoder = nn.Sequential(nn.Flatten(), nn.Linear(input_shape[0], width), nn.ReLU())
    return SplitModel.from_encoder_head(encoder, nn.Linear(width, num_classes))
