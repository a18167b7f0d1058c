"""AudioNet, the UrbanSound8K model of FLea.

Source: the FLea authors' official code (XTxiatong/FLea @ b85be07, ``models.py::AudioClassifier``), used in
"FLea: Addressing Data Scarcity and Label Skew in Federated Learning via Privacy-preserving Feature
Augmentation" (Xia et al., KDD 2024, arXiv:2312.02327) on 2-channel 64x344 mel spectrograms.

Each block is Conv2d -> ReLU -> BatchNorm2d (ReLU *before* BN, as coded):

======  ===============================  ==================
block   op                               output ([2,64,344])
======  ===============================  ==================
0       Conv2d(2->8, 5x5, s2, p2)        [8, 32, 172]
1       Conv2d(8->16, 3x3, s2, p1)       [16, 16, 86]
2       Conv2d(16->32, 3x3, s2, p1)      [32, 8, 43]
3       Conv2d(32->64, 3x3, s2, p1)      [64, 4, 22]
======  ===============================  ==================

then adaptive average pooling to 64 values and Linear(64 -> num_classes): 25,602 parameters for 10 classes.
Conv weights use ``kaiming_normal_(a=0.1)`` and zero biases, as in the official code.
"""

from __future__ import annotations

from torch import nn

from fedaug.models._layers import check_args, output_shape
from fedaug.models.base import GlobalAvgPool, SplitModel
from fedaug.registry import register

# (out_channels, kernel_size, padding) of the four conv blocks; every conv has stride 2.
_CONVS = ((8, 5, 2), (16, 3, 1), (32, 3, 1), (64, 3, 1))


def _conv_relu_bn(in_channels: int, out_channels: int, kernel_size: int, padding: int) -> nn.Sequential:
    conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=2, padding=padding)
    nn.init.kaiming_normal_(conv.weight, a=0.1)
    if conv.bias is not None:
        nn.init.zeros_(conv.bias)
    return nn.Sequential(conv, nn.ReLU(inplace=True), nn.BatchNorm2d(out_channels))


class AudioNet(SplitModel):
    """The FLea audio CNN; input ``[C, F, T]`` (UrbanSound8K: ``[2, 64, 344]``).

    Split layer 1 (FLea's ``--layer 1``) shares ``[16, 16, 86]`` per sample.
    Deviation from official code: the classifier has ``num_classes`` outputs (the official code hard-codes 10)
    and the first conv takes ``C`` input channels (hard-coded 2).
    """

    default_split = 1

    def __init__(self, *, num_classes: int, input_shape: tuple[int, ...]) -> None:
        blocks: list[nn.Module] = []
        in_channels = input_shape[0]
        for out_channels, kernel_size, padding in _CONVS:
            blocks.append(_conv_relu_bn(in_channels, out_channels, kernel_size, padding))
            in_channels = out_channels
        output_shape("audionet", blocks, input_shape)  # fails early on unusable shapes
        super().__init__(blocks, GlobalAvgPool(), nn.Linear(in_channels, num_classes))


@register(
    "model",
    "audionet",
    summary="4 conv blocks for audio spectrograms (FLea papers)",
    input_shape=(2, 64, 344),
    params=25_602,
    default_split=1,
)
def build_audionet(*, num_classes: int, input_shape: tuple[int, ...]) -> AudioNet:
    """Builds :class:`AudioNet`.

    Args:
        num_classes: number of sound classes (10 for UrbanSound8K).
        input_shape: ``(C, F, T)`` spectrogram shape; any size works thanks to the adaptive pool.

    Raises:
        IncompatibleModelError: if ``input_shape`` does not have three axes.
    """
    shape = check_args("audionet", num_classes=num_classes, input_shape=input_shape, ndim=3)
    return AudioNet(num_classes=num_classes, input_shape=shape)
