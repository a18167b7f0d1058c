"""Decoders that invert shared activations back into inputs (the reconstruction attacker's models).

Sources: FLea (Xia et al., KDD 2024) appendix D and ICLR-draft Table 10 (a decoder of "four conv2d layers"
matching MobileNetV2's split point: Conv1x1 16->32, ConvTranspose3x3 s2 32->32 (32x32 -> 64x64), Conv3x3 s2
32->32 (back to 32x32), Conv1x1 32->3), following Dosovitskiy and Brox, "Inverting visual representations with
convolutional networks" (CVPR 2016). The authors' ``MinimalDecoder`` (docs/methods/flea.md, "The authors'
code") has the same four layers and no non-linearity at all.

Registered decoders (:data:`DECODERS`), for any activation shape and any ``[C, H, W]`` input shape:

* ``linear``: the official code's decoder: the paper's four layers with no activation (an affine map);
* ``conv4``: the paper's four layers with LeakyReLU(0.2) between them (Dosovitskiy and Brox's non-linearity);
* ``deep``: the stronger non-linear attacker: two 3x3 conv blocks at the activation's resolution, bilinear
  resize to the input size, two more 3x3 conv blocks (each conv -> BatchNorm -> LeakyReLU, ``width``
  channels), and a 3x3 conv to the input channels.

Shapes. The paper's decoder keeps the activation's resolution (32x32 features for 32x32 images). Elsewhere
the activation is smaller, larger or a vector, so:

* a vector activation ``[D]`` first goes through ``Linear(D -> width * ceil(H/2) * ceil(W/2))`` reshaped to a
  map (plus the activation for the non-linear decoders);
* in ``linear``/``conv4`` the map after the transposed conv is resized (bilinear) to ``2H x 2W`` when it is
  not that size already, so the stride-2 conv lands on ``H x W``; with the paper's shapes no resize happens.

# Deviation from paper: the paper gives no activation function; ``conv4`` adds LeakyReLU(0.2) (the official
# decoder, without any, is ``linear``), and the resize / vector stem extend it to other split shapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch.nn.functional as F
from torch import Tensor, nn

from fedaug.errors import ConfigError, IncompatibleModelError

WIDTH = 32
"""Channels of the paper's decoder (and the default width of ``deep``)."""


class Resize(nn.Module):
    """Bilinear resize of ``[B, C, h, w]`` to a fixed ``(H, W)`` (the identity when the size matches)."""

    def __init__(self, size: tuple[int, int]) -> None:
        super().__init__()
        self.size = size

    def forward(self, x: Tensor) -> Tensor:
        if tuple(x.shape[-2:]) == self.size:
            return x
        return F.interpolate(x, size=self.size, mode="bilinear", align_corners=False)


def _act(nonlinear: bool) -> nn.Module:
    return nn.LeakyReLU(0.2) if nonlinear else nn.Identity()


def _stem(
    feature_shape: Sequence[int], out_hw: tuple[int, int], width: int, nonlinear: bool
) -> tuple[nn.Module, int]:
    """Turns the activation into a map ``[B, c, h, w]``; returns the module and ``c``."""
    if len(feature_shape) == 3:
        return nn.Identity(), int(feature_shape[0])
    if len(feature_shape) == 2:  # [C, L] sequences: a width-1 map
        return nn.Unflatten(2, (int(feature_shape[1]), 1)), int(feature_shape[0])
    if len(feature_shape) != 1:
        raise IncompatibleModelError(f"decoders take activations of 1 to 3 axes, got {list(feature_shape)}")
    h, w = math.ceil(out_hw[0] / 2), math.ceil(out_hw[1] / 2)
    stem = nn.Sequential(
        nn.Linear(int(feature_shape[0]), width * h * w), _act(nonlinear), nn.Unflatten(1, (width, h, w))
    )
    return stem, width


def _check_output(output_shape: Sequence[int]) -> tuple[int, int, int]:
    if len(output_shape) != 3:
        raise IncompatibleModelError(
            f"decoders reconstruct [C, H, W] inputs, got input shape {list(output_shape)}"
        )
    c, h, w = (int(v) for v in output_shape)
    return c, h, w


def four_conv_decoder(
    feature_shape: Sequence[int], output_shape: Sequence[int], *, nonlinear: bool, width: int = WIDTH
) -> nn.Sequential:
    """The paper's four-layer decoder (``nonlinear=False``: the official, purely affine one)."""
    channels, height, wide = _check_output(output_shape)
    stem, c = _stem(feature_shape, (height, wide), width, nonlinear)
    return nn.Sequential(
        stem,
        nn.Conv2d(c, width, 1),
        _act(nonlinear),
        nn.ConvTranspose2d(width, width, 3, stride=2, padding=1, output_padding=1),
        _act(nonlinear),
        Resize((2 * height, 2 * wide)),
        nn.Conv2d(width, width, 3, stride=2, padding=1),
        _act(nonlinear),
        nn.Conv2d(width, channels, 1),
    )


def _block(cin: int, cout: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.LeakyReLU(0.2)]


def deep_decoder(
    feature_shape: Sequence[int], output_shape: Sequence[int], *, width: int = WIDTH
) -> nn.Sequential:
    """The stronger non-linear decoder (see the module docstring)."""
    channels, height, wide = _check_output(output_shape)
    stem, c = _stem(feature_shape, (height, wide), width, True)
    return nn.Sequential(
        stem,
        *_block(c, width),
        *_block(width, width),
        Resize((height, wide)),
        *_block(width, width),
        *_block(width, width),
        nn.Conv2d(width, channels, 3, padding=1),
    )


DecoderBuilder = Callable[..., nn.Module]

DECODERS: dict[str, DecoderBuilder] = {
    "linear": lambda f, o, width=WIDTH: four_conv_decoder(f, o, nonlinear=False, width=width),
    "conv4": lambda f, o, width=WIDTH: four_conv_decoder(f, o, nonlinear=True, width=width),
    "deep": lambda f, o, width=WIDTH: deep_decoder(f, o, width=width),
}
"""Decoder name -> builder ``(feature_shape, output_shape, width=...) -> nn.Module``."""


def build_decoder(
    name: str, feature_shape: Sequence[int], output_shape: Sequence[int], *, width: int = WIDTH
) -> nn.Module:
    """The decoder ``name`` from activations of ``feature_shape`` to inputs of ``output_shape``.

    Raises:
        ConfigError: for an unknown name (listing the valid ones).
        IncompatibleModelError: for shapes no decoder handles.
    """
    if name not in DECODERS:
        raise ConfigError(f"unknown decoder {name!r}; valid choices: {', '.join(DECODERS)}")
    return DECODERS[name](tuple(feature_shape), tuple(output_shape), width=width)
