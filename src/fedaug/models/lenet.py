"""LeNet-5, Fed-AugMix's MNIST / FMNIST model.

Sources: "Gradient-based learning applied to document recognition" (LeCun, Bottou, Bengio and Haffner,
Proc. IEEE 1998), cited as [47] by "Fed-AugMix: Balancing Privacy and Utility via Data Augmentation"
(Section V-A), which only says "LeNet-5 [47], a 5-layer neural network" for MNIST and FMNIST.

Blocks (split layers -1..3), for a ``[1, 28, 28]`` input:

======  ==============================================  ===========
block   op                                              output
======  ==============================================  ===========
0       Conv5x5(1->6, pad 2) -> ReLU -> MaxPool2x2      [6, 14, 14]
1       Conv5x5(6->16) -> ReLU -> MaxPool2x2            [16, 5, 5]
2       flatten -> Linear(400->120) -> ReLU             [120]
3       Linear(120->84) -> ReLU                         [84]
======  ==============================================  ===========

then Linear(84 -> num_classes) (61,706 parameters for 10 classes). The FC84 output is the penultimate vector.

Deviation from paper: ReLU and max-pooling replace the 1998 paper's scaled tanh and trainable average
subsampling, the partial C3 connection table is a full conv, and a linear layer replaces the RBF output. The
Fed-AugMix paper gives no detail, and the ReLU/max-pool form is the one FL codebases use for MNIST.
"""

from __future__ import annotations

from torch import nn

from fedaug.models._layers import check_args, num_features, output_shape
from fedaug.models.base import FlattenPool, SplitModel
from fedaug.registry import register


class LeNet5(SplitModel):
    """LeNet-5 with ReLU and max-pooling; four blocks (two conv, two fully connected)."""

    default_split = 0

    def __init__(self, *, num_classes: int, input_shape: tuple[int, ...]) -> None:
        convs: list[nn.Module] = [
            nn.Sequential(nn.Conv2d(input_shape[0], 6, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(2)),
            nn.Sequential(nn.Conv2d(6, 16, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2)),
        ]
        flat = num_features(output_shape("lenet5", convs, input_shape))
        fcs: list[nn.Module] = [
            nn.Sequential(nn.Flatten(), nn.Linear(flat, 120), nn.ReLU(inplace=True)),
            nn.Sequential(nn.Linear(120, 84), nn.ReLU(inplace=True)),
        ]
        super().__init__(convs + fcs, FlattenPool(), nn.Linear(84, num_classes))


@register(
    "model",
    "lenet5",
    summary="LeNet-5: 2 conv + 2 fully connected layers",
    input_shape=(1, 28, 28),
    params=61_706,
    default_split=0,
)
def build_lenet5(*, num_classes: int, input_shape: tuple[int, ...]) -> LeNet5:
    """Builds :class:`LeNet5`.

    Args:
        num_classes: number of classes (10 for MNIST).
        input_shape: ``(C, H, W)``, e.g. ``(1, 28, 28)``; H and W must be >= 12 (the second conv needs a
            5x5 map after the first pooling). The first FC layer is sized to the input (400 for 28x28).

    Raises:
        IncompatibleModelError: for a shape without three axes or smaller than 12x12.
    """
    shape = check_args("lenet5", num_classes=num_classes, input_shape=input_shape, ndim=3)
    return LeNet5(num_classes=num_classes, input_shape=shape)
