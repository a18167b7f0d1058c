"""The split-model contract: every model is ``encoder(l)`` followed by ``head(l)``.

A :class:`SplitModel` is a list of ``blocks``, a ``pool`` that turns the last block's activation into the
penultimate feature vector, and a linear ``classifier``. Split layer ``l`` (0-based, inclusive, as in the FLea
official code) means: the encoder runs blocks ``0..l`` and the head runs blocks ``l+1..`` + pool + classifier.
``l = -1`` is the raw input (the whole network is the head). ``l = num_blocks - 1`` is the last block's
activation before pooling. Every l in :attr:`SplitModel.split_layers` works, unlike the official code where
some layers crash.

Your own model: any ``nn.Module`` that maps a batch to logits runs with the methods that only call it
(FedAvg, FedProx, ...; :class:`PlainModel` wraps it). The methods that share or read features (FLea, FedMix,
FedDecorr, CCVR, FedBR, FedRS, ...) need the split, so build the model from its parts::

    encoder = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU())
    head = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, num_classes))
    model = SplitModel.from_encoder_head(encoder, head)   # split layer 0: the encoder's output

or from a list of blocks whose last is the classifier, with the split after block ``split``
(``SplitModel.from_blocks([b0, b1, b2, nn.Linear(d, num_classes)], split=1)``).
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

    @classmethod
    def from_encoder_head(cls, encoder: nn.Module, head: nn.Module) -> SplitModel:
        """The model ``head(encoder(x))`` with its split after the encoder (``default_split = 0``).

        ``head`` is an ``nn.Linear`` or an ``nn.Sequential`` ending in one (the classifier); its other layers
        become one more block, so the split layers are -1 (raw input), 0 (the encoder's output) and 1 (before
        the classifier, when the head has more than the classifier).

        Raises:
            IncompatibleModelError: if the head does not end in an ``nn.Linear``.
        """
        layers = list(head) if isinstance(head, nn.Sequential) else [head]
        if not layers or not isinstance(layers[-1], nn.Linear):
            raise IncompatibleModelError(
                f"the head must be an nn.Linear or an nn.Sequential ending in one (the classifier), got "
                f"{type(layers[-1] if layers else head).__name__} last"
            )
        blocks: list[nn.Module] = [encoder] + ([nn.Sequential(*layers[:-1])] if len(layers) > 1 else [])
        return cls.from_blocks([*blocks, layers[-1]], split=0)

    @classmethod
    def from_blocks(cls, blocks: list[nn.Module], split: int) -> SplitModel:
        """The model that runs ``blocks`` in order, the last an ``nn.Linear`` classifier (activations are
        flattened before it), with ``default_split = split`` (-1: raw input .. ``len(blocks) - 2``).

        Raises:
            IncompatibleModelError: if the last block is not an ``nn.Linear`` or ``split`` is out of range.
        """
        if not blocks or not isinstance(blocks[-1], nn.Linear):
            raise IncompatibleModelError("the last of the blocks must be the nn.Linear classifier")
        model = cls(list(blocks[:-1]), FlattenPool(), blocks[-1])
        model.default_split = model.check_split(split)
        return model

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


class PlainModel(SplitModel):
    """Any ``nn.Module`` mapping a batch to logits, without a split: only the raw input (split layer -1) can
    be shared, and it has no penultimate features nor a linear classifier, so the methods that need them
    refuse it with an error that says how to give it a split (:meth:`SplitModel.from_encoder_head`)."""

    default_split = 0  # no such layer: a method that shares features needs a split_layer or a split model

    def __init__(self, net: nn.Module, num_classes: int, name: str = "") -> None:
        nn.Module.__init__(self)
        self.blocks = nn.ModuleList()
        self.pool = net  # decode(x, -1) runs pool(x) via the classifier path below
        self._num_classes = num_classes
        self._name = name or type(net).__name__

    def _no_split(self, what: str) -> IncompatibleModelError:
        return IncompatibleModelError(
            f"model {self._name!r} is a plain nn.Module without an encoder/head split, so it has no {what}; "
            "the method needs one: build the model with fedaug.models.base.SplitModel.from_encoder_head("
            "encoder, head) or SplitModel.from_blocks(blocks, split) (docs/guide/your-own-data.md)"
        )

    @property
    def num_classes(self) -> int:
        return self._num_classes

    @property
    def classifier(self) -> nn.Linear:  # type: ignore[override]
        raise self._no_split("linear classifier")

    def check_split(self, layer: int) -> int:
        if layer != -1:
            raise self._no_split(f"split layer {layer} (only -1, the raw input)")
        return layer

    def decode(self, h: Tensor, layer: int) -> Tensor:
        self.check_split(layer)
        return self.forward(h)

    def penultimate(self, x: Tensor) -> Tensor:
        raise self._no_split("penultimate features")

    def forward(self, x: Tensor) -> Tensor:
        logits: Tensor = self.pool(x)
        return logits
