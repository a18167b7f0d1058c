"""A multilayer perceptron for any input shape (fast tests on synthetic data; FedBR's discriminator).

Source: the ``MLP(n_in, n_out)`` of the FLea authors' official code (XTxiatong/FLea @ b85be07, ``models.py``:
one hidden layer of width 256 with ReLU). Each hidden layer is a block (block 0 flattens the input first), so
the split layers are -1..len(hidden_sizes) - 1 and the last hidden activation is the penultimate vector.
"""

from __future__ import annotations

import math

from torch import nn

from fedaug.errors import IncompatibleModelError
from fedaug.models._layers import check_args
from fedaug.models.base import FlattenPool, SplitModel
from fedaug.registry import register
from fedaug.validation import invalid


class MLP(SplitModel):
    """Flatten -> (Linear -> ReLU) per hidden size -> Linear(num_classes)."""

    default_split = 0

    def __init__(
        self, *, num_classes: int, input_shape: tuple[int, ...], hidden_sizes: tuple[int, ...]
    ) -> None:
        blocks: list[nn.Module] = []
        width = math.prod(input_shape)
        for i, hidden in enumerate(hidden_sizes):
            layers: list[nn.Module] = [nn.Flatten()] if i == 0 else []
            blocks.append(nn.Sequential(*layers, nn.Linear(width, hidden), nn.ReLU(inplace=True)))
            width = hidden
        super().__init__(blocks, FlattenPool(), nn.Linear(width, num_classes))


@register(
    "model",
    "mlp",
    summary="flatten + hidden layers (hidden_sizes)",
    input_shape=None,
    params=None,
    default_split=0,
)
def build_mlp(
    *, num_classes: int, input_shape: tuple[int, ...], hidden_sizes: tuple[int, ...] = (256,)
) -> MLP:
    """Builds :class:`MLP`.

    Args:
        num_classes: number of classes.
        input_shape: any per-sample shape, e.g. ``(16,)`` or ``(1, 8, 8)``; it is flattened.
        hidden_sizes: widths of the hidden ReLU layers; ``()`` gives a linear model (split layer -1 only).

    Raises:
        IncompatibleModelError: for a non-positive hidden size or input dimension.
    """
    shape = check_args("mlp", num_classes=num_classes, input_shape=input_shape)
    if not isinstance(hidden_sizes, list | tuple) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in hidden_sizes
    ):  # a string would iterate as its characters ('' as no hidden layer: a linear model, in silence)
        raise invalid("model.hidden_sizes", "a list of integer widths ([] for a linear model)", hidden_sizes)
    if any(h < 1 for h in hidden_sizes):
        raise IncompatibleModelError(f"mlp hidden_sizes must all be >= 1, got {tuple(hidden_sizes)}")
    return MLP(num_classes=num_classes, input_shape=shape, hidden_sizes=tuple(hidden_sizes))
