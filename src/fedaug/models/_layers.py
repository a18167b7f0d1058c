"""Helpers shared by the model builders: argument checks, shape inference and the common conv block."""

from __future__ import annotations

import torch
from torch import nn

from fedaug.errors import IncompatibleModelError


def check_args(
    model: str, *, num_classes: int, input_shape: tuple[int, ...], ndim: int | None = None
) -> tuple[int, ...]:
    """Validates a builder's arguments and returns ``input_shape`` as a tuple of ints.

    Args:
        model: registry name of the model, used in the error messages.
        num_classes: number of output classes; must be >= 1.
        input_shape: shape of one sample, without the batch axis.
        ndim: required number of axes in ``input_shape`` (3 for images: C, H, W), or None for any.

    Returns:
        ``input_shape`` as a tuple.

    Raises:
        IncompatibleModelError: if ``num_classes`` < 1, a dimension is < 1 or the number of axes is wrong.
    """
    shape = tuple(int(d) for d in input_shape)
    if num_classes < 1:
        raise IncompatibleModelError(f"{model}: num_classes must be >= 1, got {num_classes}")
    if not shape or any(d < 1 for d in shape):
        raise IncompatibleModelError(f"{model}: input_shape must be non-empty and positive, got {shape}")
    if ndim is not None and len(shape) != ndim:
        raise IncompatibleModelError(
            f"{model} needs a {ndim}-axis input shape per sample (channels, height, width), got {shape}"
        )
    return shape


@torch.no_grad()
def output_shape(model: str, blocks: list[nn.Module], input_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Shape (without batch) after running ``blocks`` on one zero input of ``input_shape``.

    Runs in eval mode so BatchNorm running statistics are untouched, on the blocks' device (the CPU where
    they have no parameters).

    Raises:
        IncompatibleModelError: if the blocks cannot process that shape (e.g. the input is too small).
    """
    param = next((p for block in blocks for p in block.parameters()), None)
    x = torch.zeros(1, *input_shape, device=None if param is None else param.device)
    try:
        for block in blocks:
            was_training = block.training
            x = block.eval()(x)
            block.train(was_training)
    except RuntimeError as err:
        raise IncompatibleModelError(f"{model} cannot take input shape {input_shape}: {err}") from err
    return tuple(x.shape[1:])


def num_features(shape: tuple[int, ...]) -> int:
    """Number of values in an activation of ``shape`` (the flattened feature size)."""
    return int(torch.Size(shape).numel())


def conv_bn_relu(
    in_channels: int, out_channels: int, kernel_size: int, *, padding: int, stride: int = 1
) -> list[nn.Module]:
    """Conv2d -> BatchNorm2d -> ReLU, the block most CNNs here are made of."""
    return [
        nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    ]
