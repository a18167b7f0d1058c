"""The split-model contract: every model is ``encoder(l)`` followed by ``head(l)``.

A :class:`SplitModel` is a list of ``blocks``, a ``pool`` that turns the last block's activation into the
penultimate feature vector, and a linear ``classifier``. Split layer ``l`` (0-based, inclusive, as in the FLea
official code) means: the encoder runs blocks ``0..l`` and the head runs blocks ``l+1..`` + pool + classifier.
``l = -1`` is the raw input (the whole network is the head). ``l = num_blocks - 1`` is the last block's
activation before pooling. Every l in :attr:`SplitModel.split_layers` works, unlike the official code where
some layers crash.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fedaug.errors import IncompatibleModelError


class SplitModel(nn.Module):
    """Base class of all fedaug models.

    Attributes:
        blocks: the feature blocks, run in order.
        pool: maps the last block's activation to the penultimate vector ``[B, feature_dim]``.
        classifier: the final linear layer ``feature_dim -> num_classes``.
        default_split: the split layer the papers use for this model.
    """

    default_split: int = 0

    def __init__(self, blocks: list[nn.Module], pool: nn.Module, classifier: nn.Linear) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.pool = pool
        self.classifier = classifier

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def split_layers(self) -> range:
        """Valid split layers: -1 (raw input) to num_blocks - 1."""
        return range(-1, self.num_blocks)

    @property
    def num_classes(self) -> int:
        return self.classifier.out_features

    def check_split(self, layer: int) -> int:
        """Returns ``layer`` if valid, else raises IncompatibleModelError naming the valid layers."""
        if layer not in self.split_layers:
            raise IncompatibleModelError(
                f"split layer {layer} does not exist in {type(self).__name__}; "
                f"valid layers: {self.split_layers.start}..{self.split_layers.stop - 1}"
            )
        return layer

    def encode(self, x: Tensor, layer: int) -> Tensor:
        """Activation after block ``layer`` (the encoder ``encoder(l)``); ``layer = -1`` returns x."""
        self.check_split(layer)
        for block in self.blocks[: layer + 1]:
            x = block(x)
        return x

    def decode(self, h: Tensor, layer: int) -> Tensor:
        """Logits from the activation after block ``layer`` (the head ``head(l)``)."""
        self.check_split(layer)
        for block in self.blocks[layer + 1 :]:
            h = block(h)
        logits: Tensor = self.classifier(self.pool(h))
        return logits

    def penultimate(self, x: Tensor) -> Tensor:
        """The pooled feature vector that feeds the classifier (FedDecorr, CCVR, FedBR use it)."""
        features: Tensor = self.pool(self.encode(x, self.num_blocks - 1))
        return features

    def forward(self, x: Tensor) -> Tensor:
        for block in self.blocks:
            x = block(x)
        logits: Tensor = self.classifier(self.pool(x))
        return logits

    @torch.no_grad()
    def activation_shape(self, input_shape: tuple[int, ...], layer: int) -> tuple[int, ...]:
        """Shape (without batch) of the activation at ``layer`` for one input of ``input_shape``."""
        was_training = self.training
        self.eval()
        param = next(self.parameters(), None)  # probe on the model's device and dtype (it may be on a GPU)
        probe = torch.zeros(1, *input_shape) if param is None else param.new_zeros(1, *input_shape)
        shape = tuple(self.encode(probe, layer).shape[1:])
        self.train(was_training)
        return shape


class FlattenPool(nn.Module):
    """Flattens everything but the batch axis (HARNet and the small CNNs pool this way)."""

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(1)


class GlobalAvgPool(nn.Module):
    """Adaptive average pool to 1x1 then flatten."""

    def forward(self, x: Tensor) -> Tensor:
        return x.mean(dim=(2, 3)) if x.dim() == 4 else x.flatten(1)
