"""MobileNetV2, CIFAR variant (the FLea CIFAR10 model).

Sources: "MobileNetV2: Inverted Residuals and Linear Bottlenecks" (Sandler et al., CVPR 2018,
arXiv:1801.04381); the CIFAR adaptation of kuangliu/pytorch-cifar ``models/mobilenetv2.py`` as copied into the
FLea authors' official code (XTxiatong/FLea @ b85be07, ``models.py::MobileNetV2``), used in "FLea: Addressing
Data Scarcity and Label Skew in Federated Learning via Privacy-preserving Feature Augmentation" (Xia et al.,
KDD 2024, arXiv:2312.02327), which describes it as "MobileNet_V2 with 18 blocks".

Blocks (19 in all; split layers -1..18):

* block 0: the stem, Conv3x3(3->32, stride 1, no bias) + BN + ReLU -> ``[32, 32, 32]``;
* blocks 1..17: the inverted-residual blocks (official ``layers[0..16]``), strides 2 at blocks 4, 7 and 14;
* block 18: Conv1x1(320->1280, no bias) + BN + ReLU -> ``[1280, 4, 4]``;

then global average pooling (the official ``avg_pool2d(4)`` on a 4x4 map is the same) and
Linear(1280 -> num_classes): 2,296,922 parameters for 10 classes.

Mapping to the official ``layer`` argument: official layer ``k`` (0..16) is our layer ``k + 1``. The FLea
CIFAR script's ``--layer 0`` ([16, 32, 32]) is our default split 1. Official ``get_feature(x, 17)`` (the
pooled 1280-d vector) is our :meth:`~fedaug.models.base.SplitModel.penultimate`.
Deviation from official code: the stem is a block of its own, so split layer -1 is the raw input (the
official model methods treat -1 as the stem output while clients share raw images), and every layer works
(official ``forward_feature(h, 17)`` crashes).
"""

from __future__ import annotations

from torch import Tensor, nn

from fedaug.models._layers import check_args
from fedaug.models.base import GlobalAvgPool, SplitModel
from fedaug.registry import register

# (expansion, out_channels, num_blocks, stride) of each stage; kuangliu's CIFAR config (stride 1 in stage 2).
_STAGES = (
    (1, 16, 1, 1),
    (6, 24, 2, 1),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
_STEM_CHANNELS = 32
_LAST_CHANNELS = 1280


class InvertedResidual(nn.Module):
    """1x1 expand + BN + ReLU, 3x3 depthwise (stride s) + BN + ReLU, 1x1 project + BN (linear bottleneck).

    As in kuangliu's code, the residual is added only when ``stride == 1`` (with a 1x1 conv + BN shortcut when
    the channel count changes), and the expansion conv exists even when ``expansion == 1``.
    """

    def __init__(self, in_channels: int, out_channels: int, *, expansion: int, stride: int) -> None:
        super().__init__()
        hidden = expansion * in_channels
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, hidden, 1, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU(inplace=True),
            nn.Conv2d(hidden, hidden, 3, stride=stride, padding=1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU(inplace=True),
            nn.Conv2d(hidden, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
        )
        self.use_residual = stride == 1
        self.shortcut: nn.Module = nn.Identity()
        if stride == 1 and in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, bias=False), nn.BatchNorm2d(out_channels)
            )

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.body(x)
        return out + self.shortcut(x) if self.use_residual else out


def _conv_bn_relu(in_channels: int, out_channels: int, kernel_size: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


class MobileNetV2CIFAR(SplitModel):
    """MobileNetV2 for 32x32 images: stem (block 0), 17 inverted residuals (1..17), 1x1 conv (block 18)."""

    default_split = 1

    def __init__(self, *, num_classes: int, in_channels: int = 3) -> None:
        blocks: list[nn.Module] = [_conv_bn_relu(in_channels, _STEM_CHANNELS, 3)]
        channels = _STEM_CHANNELS
        for expansion, out_channels, num_blocks, first_stride in _STAGES:
            for i in range(num_blocks):
                stride = first_stride if i == 0 else 1
                blocks.append(InvertedResidual(channels, out_channels, expansion=expansion, stride=stride))
                channels = out_channels
        blocks.append(_conv_bn_relu(channels, _LAST_CHANNELS, 1))
        super().__init__(blocks, GlobalAvgPool(), nn.Linear(_LAST_CHANNELS, num_classes))


@register(
    "model",
    "mobilenet_v2_cifar",
    summary="MobileNetV2 for 32x32 images (FLea papers)",
    input_shape=(3, 32, 32),
    params=2_296_922,
    default_split=1,
)
def build_mobilenet_v2_cifar(*, num_classes: int, input_shape: tuple[int, ...]) -> MobileNetV2CIFAR:
    """Builds :class:`MobileNetV2CIFAR`.

    Args:
        num_classes: number of classes (10 for CIFAR10).
        input_shape: ``(C, H, W)``; designed for ``(3, 32, 32)``.

    Deviation from official code: any channel count and image size are accepted (the stem takes ``C``
    channels and global average pooling replaces ``avg_pool2d(4)``, identical on the 4x4 map of a 32x32
    input), so e.g. ``(1, 28, 28)`` MNIST works with a 4x4 final map too.

    Raises:
        IncompatibleModelError: if ``input_shape`` does not have three axes.
    """
    shape = check_args("mobilenet_v2_cifar", num_classes=num_classes, input_shape=input_shape, ndim=3)
    return MobileNetV2CIFAR(num_classes=num_classes, in_channels=shape[0])
