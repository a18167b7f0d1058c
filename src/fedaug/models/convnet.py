"""ConvNet, the gradient-inversion literature's CNN.

Source: "Inverting Gradients - How easy is it to break privacy in federated learning?" (Geiping, Bauermeister,
Dröge and Moeller, NeurIPS 2020, arXiv:2003.14053); official code JonasGeiping/invertinggradients,
``inversefed/nn/models.py::ConvNet`` (``construct_model('ConvNet')`` uses width 64).

Eight blocks of Conv3x3(pad 1) -> BN -> ReLU with widths w, 2w, 2w, 4w, 4w, 4w, 4w, 4w; a MaxPool2d(3) ends
blocks 5 and 7. For ``[3, 32, 32]``: blocks 0..5 keep 32x32, block 5 pools to 10x10, block 7 to 3x3, so
the flattened feature is 36w values, then Linear(36w -> num_classes) (2,904,970 parameters for w = 64 and
10 classes).
The official code lists ``conv6`` twice in an ``OrderedDict``; the second entry overwrites the first, so the
network it builds has the eight convs above, which is what we build.
Deviation from official code: the first conv takes the input's channel count and the linear layer is sized
to the input (36w for 32x32 and also for 28x28, since 28 -> 9 -> 3).
"""

from __future__ import annotations

from torch import nn

from fedaug.errors import IncompatibleModelError
from fedaug.models._layers import check_args, conv_bn_relu, num_features, output_shape
from fedaug.models.base import FlattenPool, SplitModel
from fedaug.registry import register

# Width multiplier of each conv block, and the blocks followed by MaxPool2d(3).
_MULTIPLIERS = (1, 2, 2, 4, 4, 4, 4, 4)
_POOL_AFTER = (5, 7)


class ConvNet(SplitModel):
    """The inversefed ConvNet (BN variant) with eight conv blocks; split layers -1..7."""

    default_split = 0

    def __init__(self, *, num_classes: int, input_shape: tuple[int, ...], width: int = 64) -> None:
        blocks: list[nn.Module] = []
        in_channels = input_shape[0]
        for i, multiplier in enumerate(_MULTIPLIERS):
            layers = conv_bn_relu(in_channels, multiplier * width, 3, padding=1)
            if i in _POOL_AFTER:
                layers.append(nn.MaxPool2d(3))
            blocks.append(nn.Sequential(*layers))
            in_channels = multiplier * width
        feature_dim = num_features(output_shape("convnet", blocks, input_shape))
        super().__init__(blocks, FlattenPool(), nn.Linear(feature_dim, num_classes))


@register(
    "model",
    "convnet",
    summary="Inverting Gradients' ConvNet (width 64)",
    input_shape=(3, 32, 32),
    params=2_904_970,
    default_split=0,
)
def build_convnet(*, num_classes: int, input_shape: tuple[int, ...], width: int = 64) -> ConvNet:
    """Builds :class:`ConvNet`.

    Args:
        num_classes: number of classes.
        input_shape: ``(C, H, W)`` with H, W >= 9 (two 3x3 max-pools), e.g. ``(3, 32, 32)``.
        width: base channel count ``w`` (64 in the paper's experiments).

    Raises:
        IncompatibleModelError: for ``width`` < 1, a shape without three axes or smaller than 9x9.
    """
    shape = check_args("convnet", num_classes=num_classes, input_shape=input_shape, ndim=3)
    if width < 1:
        raise IncompatibleModelError(f"convnet width must be >= 1, got {width}")
    return ConvNet(num_classes=num_classes, input_shape=shape, width=width)
