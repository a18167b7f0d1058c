"""A user's plugin as the tests use it: a dataset (4 Gaussian blobs in 6 dimensions), a model built from an
encoder and a head, a partitioner and a method, registered with fedaug's public decorators."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

import fedaug
from fedaug.data.base import Dataset, LoadContext
from fedaug.methods.fedavg import FedAvg
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


@fedaug.register_partitioner("plugin_halves")
def plugin_halves(
    labels: np.ndarray, *, num_clients: int, num_classes: int, rng: np.random.Generator, first: float = 0.5
) -> list[np.ndarray]:
    """Client 0 gets the first ``first`` of the samples, the others share the rest in order."""
    del num_classes, rng
    cut = int(first * labels.size)
    return [np.arange(cut), *np.array_split(np.arange(cut, labels.size), num_clients - 1)]


@fedaug.register_method("plugin_fedavg")
class PluginFedAvg(FedAvg):
    """FedAvg under another name."""

    name = "plugin_fedavg"
