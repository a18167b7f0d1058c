"""ResNet-18 and ResNet-50 with the CIFAR stem (Fed-AugMix's CIFAR models).

Sources: "Deep Residual Learning for Image Recognition" (He et al., CVPR 2016, arXiv:1512.03385); the CIFAR
variant of kuangliu/pytorch-cifar ``models/resnet.py`` (3x3 stride-1 stem, no max-pool, stride on the 3x3
conv of a bottleneck); "Fed-AugMix: Balancing Privacy and Utility via Data Augmentation" (Section V-A) uses
ResNet-50 for CIFAR-10/100.

Blocks: block 0 is the stem (Conv3x3 -> BN -> ReLU, ``[64, 32, 32]``); every residual block is a block of its
own (ResNet-18: blocks 1..8, ResNet-50: blocks 1..16), which gives the finest split points that keep the
residual connections inside a block. Pool: global average; classifier Linear(512 * expansion -> classes).
Parameter counts for 10 classes: ResNet-18 11,173,962, ResNet-50 23,520,842 (as kuangliu's models).
Deviation from paper: the CIFAR stem (3x3 stride 1, no max-pool) replaces the ImageNet stem
(7x7 stride 2 + max-pool), as is standard for 32x32 inputs.
"""

from __future__ import annotations

from torch import Tensor, nn

from fedaug.models._layers import check_args
from fedaug.models.base import GlobalAvgPool, SplitModel
from fedaug.registry import register

_STAGE_WIDTHS = (64, 128, 256, 512)
_STAGE_STRIDES = (1, 2, 2, 2)


def _shortcut(in_channels: int, out_channels: int, stride: int) -> nn.Module:
    if stride == 1 and in_channels == out_channels:
        return nn.Identity()
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False), nn.BatchNorm2d(out_channels)
    )


class BasicBlock(nn.Module):
    """Two 3x3 convs with BN; ReLU after the residual addition."""

    expansion = 1

    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
        )
        self.shortcut = _shortcut(in_channels, width, stride)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.relu(self.body(x) + self.shortcut(x))
        return out


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (stride here), 1x1 expand by 4, each with BN; ReLU after the residual addition."""

    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, width, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
        )
        self.shortcut = _shortcut(in_channels, out_channels, stride)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.relu(self.body(x) + self.shortcut(x))
        return out


class ResNetCIFAR(SplitModel):
    """ResNet with a CIFAR stem; block 0 = stem, then one block per residual block."""

    default_split = 1  # the first residual block's output, [64, 32, 32] (like FLea's MobileNet split)

    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        depths: tuple[int, ...],
        *,
        num_classes: int,
        in_channels: int = 3,
    ) -> None:
        stem_width = _STAGE_WIDTHS[0]
        blocks: list[nn.Module] = [
            nn.Sequential(
                nn.Conv2d(in_channels, stem_width, 3, padding=1, bias=False),
                nn.BatchNorm2d(stem_width),
                nn.ReLU(inplace=True),
            )
        ]
        channels = stem_width
        for width, stride, depth in zip(_STAGE_WIDTHS, _STAGE_STRIDES, depths, strict=True):
            for i in range(depth):
                blocks.append(block(channels, width, stride if i == 0 else 1))
                channels = width * block.expansion
        super().__init__(blocks, GlobalAvgPool(), nn.Linear(channels, num_classes))


@register(
    "model",
    "resnet18_cifar",
    summary="ResNet-18 for 32x32 images",
    input_shape=(3, 32, 32),
    params=11_173_962,
    default_split=1,
)
def build_resnet18_cifar(*, num_classes: int, input_shape: tuple[int, ...]) -> ResNetCIFAR:
    """Builds ResNet-18 (BasicBlock x [2, 2, 2, 2], 9 blocks) for ``(C, H, W)`` images, e.g. ``(3, 32, 32)``.

    Raises:
        IncompatibleModelError: if ``input_shape`` does not have three axes.
    """
    shape = check_args("resnet18_cifar", num_classes=num_classes, input_shape=input_shape, ndim=3)
    return ResNetCIFAR(BasicBlock, (2, 2, 2, 2), num_classes=num_classes, in_channels=shape[0])


@register(
    "model",
    "resnet50_cifar",
    summary="ResNet-50 (bottleneck blocks) for 32x32 images",
    input_shape=(3, 32, 32),
    params=23_520_842,
    default_split=1,
)
def build_resnet50_cifar(*, num_classes: int, input_shape: tuple[int, ...]) -> ResNetCIFAR:
    """Builds ResNet-50 (Bottleneck x [3, 4, 6, 3], 17 blocks) for ``(C, H, W)`` images, e.g. ``(3, 32, 32)``.

    Raises:
        IncompatibleModelError: if ``input_shape`` does not have three axes.
    """
    shape = check_args("resnet50_cifar", num_classes=num_classes, input_shape=input_shape, ndim=3)
    return ResNetCIFAR(Bottleneck, (3, 4, 6, 3), num_classes=num_classes, in_channels=shape[0])
