"""The models, each a :class:`~fedaug.models.base.SplitModel` with named split points.

The registry imports every module of this package the first time a model is asked for, which registers the
built-in ones; importing the package itself registers nothing. Build a model by name with :func:`build_model`.

==================== ========================== =================== ==========================
name                 paper / dataset            example input       default split (activation)
==================== ========================== =================== ==========================
harnet               FLea, UCI-HAR              (1, 128, 3)         1 ([128, 20, 7])
audionet             FLea, UrbanSound8K         (2, 64, 344)        1 ([16, 16, 86])
mobilenet_v2_cifar   FLea, CIFAR10              (3, 32, 32)         1 ([16, 32, 32])
lenet5               Fed-AugMix, MNIST          (1, 28, 28)         0 ([6, 14, 14])
resnet18_cifar       Fed-AugMix, CIFAR          (3, 32, 32)         1 ([64, 32, 32])
resnet50_cifar       Fed-AugMix, CIFAR          (3, 32, 32)         1 ([256, 32, 32])
bn_cnn_mnist         Fed-ZDA, MNIST / FMNIST    (1, 28, 28)         0 ([16, 14, 14])
bn_cnn_cifar         Fed-ZDA, CIFAR10           (3, 32, 32)         0 ([16, 16, 16])
convnet              Inverting Gradients        (3, 32, 32)         0 ([64, 32, 32])
mlp                  synthetic data / tests     any                 0 ([256])
==================== ========================== =================== ==========================
"""

from __future__ import annotations

import inspect
from typing import Any

from torch import nn

from fedaug import registry
from fedaug.errors import ConfigError
from fedaug.models.base import FlattenPool, GlobalAvgPool, PlainModel, SplitModel

__all__ = ["FlattenPool", "GlobalAvgPool", "PlainModel", "SplitModel", "as_split_model", "build_model"]


def build_model(name: str, *, num_classes: int, input_shape: tuple[int, ...], **options: Any) -> SplitModel:
    """Builds the registered model ``name``.

    Args:
        name: registry name, e.g. ``"harnet"``; ``fedaug.registry.available("model")`` lists them.
        num_classes: number of output classes.
        input_shape: shape of one sample without the batch axis, e.g. ``(1, 128, 3)``.
        **options: model-specific keywords with defaults (``width`` for convnet, ``hidden_sizes`` for mlp).

    Returns:
        The model, in training mode, with freshly initialised weights.

    Raises:
        RegistryError: if ``name`` is unknown (the message lists the valid names).
        ConfigError: if an option is not a keyword of that model's builder.
        IncompatibleModelError: if the model cannot take ``input_shape`` or ``num_classes``.
    """
    builder = registry.get("model", name)
    accepted = set(inspect.signature(builder).parameters) - {"num_classes", "input_shape"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ConfigError(
            f"model {name!r} has no option(s) {', '.join(unknown)}; "
            f"valid options: {', '.join(sorted(accepted)) or 'none'}"
        )
    built = builder(num_classes=num_classes, input_shape=tuple(input_shape), **options)
    return as_split_model(built, name=name, num_classes=num_classes, builder=builder)


def as_split_model(built: Any, *, name: str, num_classes: int, builder: Any = None) -> SplitModel:
    """``built`` as a SplitModel: itself, or a plain ``nn.Module`` wrapped in :class:`PlainModel`.

    Raises:
        PluginError: if ``built`` is not an ``nn.Module`` (naming the plugin that registered ``name``).
    """
    if isinstance(built, SplitModel):
        return built
    if isinstance(built, nn.Module):
        return PlainModel(built, num_classes, name)
    from fedaug.plugins import PluginError, origin

    raise PluginError(
        f"model {name!r} ({origin(builder)}) returned {type(built).__name__}, expected a torch.nn.Module "
        "(a fedaug.models.base.SplitModel works with every method)"
    )
