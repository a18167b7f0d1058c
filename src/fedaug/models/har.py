"""HARNet, the UCI-HAR model of FLea.

Source: the FLea authors' official code (XTxiatong/FLea @ b85be07, ``models.py::HARNet``), used in
"FLea: Addressing Data Scarcity and Label Skew in Federated Learning via Privacy-preserving Feature
Augmentation" (Xia et al., KDD 2024, arXiv:2312.02327), which calls it "a 4-layer 1D CNN" on 128x3 inputs.

Each of the four blocks is Conv2d with a (k, 1) kernel -> BatchNorm2d -> ReLU. As in the official code every
conv pads 1 on *both* axes, so the sensor axis grows by two zero columns per block (3 -> 5 -> 7 -> 9 -> 11):

======  =======================================  ==================
block   op                                       output ([1,128,3])
======  =======================================  ==================
0       Conv2d(1->64, k=(3,1), s=(3,1), p=1)     [64, 43, 5]
1       Conv2d(64->128, k=(6,1), s=(2,1), p=1)   [128, 20, 7]
2       Conv2d(128->256, k=(6,1), s=(2,1), p=1)  [256, 9, 9]
3       Conv2d(256->256, k=(6,1), s=(2,1), p=1)  [256, 3, 11]
======  =======================================  ==================

then flatten (8448 values) and Linear(8448 -> num_classes): 691,974 parameters for 6 classes, the count the
official training log prints. Default PyTorch initialisation, as in the official code.
"""

from __future__ import annotations

from torch import nn

from fedaug.errors import IncompatibleModelError
from fedaug.models._layers import check_args, num_features, output_shape
from fedaug.models.base import FlattenPool, SplitModel
from fedaug.registry import register

# (in_channels, out_channels, kernel height, stride height) of the four conv blocks.
_CONVS = ((1, 64, 3, 3), (64, 128, 6, 2), (128, 256, 6, 2), (256, 256, 6, 2))


class HARNet(SplitModel):
    """The FLea HAR CNN; input ``[1, T, S]`` (T = 128 time steps, S = 3 or 9 sensor channels).

    Split layer 1 (FLea's ``--layer 1``) shares ``[128, 20, 7]`` per sample for ``[1, 128, 3]`` input.
    Deviation from official code: every split layer -1..3 works (the official ``forward_feature`` crashes at 2
    and ``get_feature`` returns None above 2), and ``num_classes`` / the sensor count set the linear size.
    """

    default_split = 1

    def __init__(self, *, num_classes: int, input_shape: tuple[int, ...]) -> None:
        blocks: list[nn.Module] = [
            nn.Sequential(
                nn.Conv2d(c_in, c_out, kernel_size=(k, 1), stride=(s, 1), padding=1),
                nn.BatchNorm2d(c_out),
                nn.ReLU(inplace=True),
            )
            for c_in, c_out, k, s in _CONVS
        ]
        feature_dim = num_features(output_shape("harnet", blocks, input_shape))
        super().__init__(blocks, FlattenPool(), nn.Linear(feature_dim, num_classes))


@register(
    "model",
    "harnet",
    summary="4 conv blocks for inertial windows (FLea papers)",
    input_shape=(1, 128, 3),
    params=691_974,
    default_split=1,
    num_classes=6,
)
def build_harnet(*, num_classes: int, input_shape: tuple[int, ...]) -> HARNet:
    """Builds :class:`HARNet`.

    Args:
        num_classes: number of activities (6 for UCI-HAR).
        input_shape: ``(1, T, S)``; UCI-HAR is ``(1, 128, 3)`` or ``(1, 128, 9)``. T must be >= 64 so that the
            four strided convs leave at least one time step.

    Raises:
        IncompatibleModelError: for a shape that is not ``(1, T, S)`` or too short in time.
    """
    shape = check_args("harnet", num_classes=num_classes, input_shape=input_shape, ndim=3)
    if shape[0] != 1:
        raise IncompatibleModelError(
            f"harnet takes one input channel laid out as (1, time, sensors), got input_shape {shape}"
        )
    return HARNet(num_classes=num_classes, input_shape=shape)
