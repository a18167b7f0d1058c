"""The small BatchNorm CNNs of Fed-ZDA (zero-shot data augmentation needs BN statistics to match).

Source: "Towards Fair Federated Learning with Zero-Shot Data Augmentation" (Fed-ZDAC / Fed-ZDAS; Hao,
El-Khamy, Lee, Zhang, Liang, Chen and Carin, CVPR Workshops 2021, arXiv:2104.13417), Section 4.1:

* MNIST / FMNIST (``bn_cnn_mnist``): "two 5x5 convolution layers with 16 and 32 output channels ... Each
  convolution layer is followed by a batch normalization layer and a 2x2 max-pooling operation with ReLU
  activations. A fully connected layer with a softmax is added for the output."
  Blocks: 0 = Conv5x5(1->16, pad 2) -> BN -> MaxPool -> ReLU ``[16, 14, 14]``; 1 = the same with 16->32
  ``[32, 7, 7]``; flatten (1568) -> Linear(1568 -> classes). 29,034 parameters for 10 classes.
* CIFAR-10 (``bn_cnn_cifar``): "two 3x3 convolution layers with 16 filters each ... followed by two
  fully-connected layers with hidden size 80 and 60". Blocks: 0 = Conv3x3(3->16, pad 1) -> BN -> MaxPool ->
  ReLU ``[16, 16, 16]``; 1 = the same with 16->16 ``[16, 8, 8]``; 2 = flatten -> Linear(1024->80) -> ReLU;
  3 = Linear(80->60) -> ReLU; then Linear(60 -> classes). 90,302 parameters for 10 classes.

The paper gives no padding; we use "same" padding (2 for 5x5, 1 for 3x3), as the common PyTorch MNIST CNN
with this exact layer list does. Max-pooling then ReLU is the paper's order and equals ReLU then max-pooling.
The softmax is left to the loss (logits out), as everywhere in fedaug.
"""

from __future__ import annotations

from torch import nn

from fedaug.models._layers import check_args, num_features, output_shape
from fedaug.models.base import FlattenPool, SplitModel
from fedaug.registry import register


def _conv_bn_pool_relu(in_channels: int, out_channels: int, kernel_size: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2),
        nn.BatchNorm2d(out_channels),
        nn.MaxPool2d(2),
        nn.ReLU(inplace=True),
    )


class BNCNN(SplitModel):
    """Two conv blocks (conv -> BN -> 2x2 max-pool -> ReLU), optional hidden FC blocks, linear classifier.

    Args:
        num_classes: number of classes.
        input_shape: ``(C, H, W)``.
        channels: output channels of the two conv blocks.
        kernel_size: conv kernel size (odd; padded to keep the spatial size).
        hidden_sizes: widths of the fully connected ReLU blocks after the convs (each one a block).
        name: registry name, for error messages.
    """

    default_split = 0

    def __init__(
        self,
        *,
        num_classes: int,
        input_shape: tuple[int, ...],
        channels: tuple[int, int],
        kernel_size: int,
        hidden_sizes: tuple[int, ...] = (),
        name: str = "bn_cnn",
    ) -> None:
        convs: list[nn.Module] = [
            _conv_bn_pool_relu(input_shape[0], channels[0], kernel_size),
            _conv_bn_pool_relu(channels[0], channels[1], kernel_size),
        ]
        width = num_features(output_shape(name, convs, input_shape))
        fcs: list[nn.Module] = []
        for i, hidden in enumerate(hidden_sizes):
            layers: list[nn.Module] = [nn.Flatten()] if i == 0 else []
            fcs.append(nn.Sequential(*layers, nn.Linear(width, hidden), nn.ReLU(inplace=True)))
            width = hidden
        super().__init__(convs + fcs, FlattenPool(), nn.Linear(width, num_classes))


@register(
    "model",
    "bn_cnn_mnist",
    summary="Fed-ZDA's MNIST CNN with BatchNorm",
    input_shape=(1, 28, 28),
    params=29_034,
    default_split=0,
)
def build_bn_cnn_mnist(*, num_classes: int, input_shape: tuple[int, ...]) -> BNCNN:
    """Builds the Fed-ZDA MNIST/FMNIST CNN (two 5x5 convs, 16/32 channels) for ``(C, H, W)`` >= 4x4.

    Raises:
        IncompatibleModelError: for a shape without three axes or smaller than 4x4.
    """
    shape = check_args("bn_cnn_mnist", num_classes=num_classes, input_shape=input_shape, ndim=3)
    return BNCNN(
        num_classes=num_classes, input_shape=shape, channels=(16, 32), kernel_size=5, name="bn_cnn_mnist"
    )


@register(
    "model",
    "bn_cnn_cifar",
    summary="Fed-ZDA's CIFAR-10 CNN with BatchNorm",
    input_shape=(3, 32, 32),
    params=90_302,
    default_split=0,
)
def build_bn_cnn_cifar(*, num_classes: int, input_shape: tuple[int, ...]) -> BNCNN:
    """Builds the Fed-ZDA CIFAR-10 CNN (two 3x3 convs, 16 channels, FC 80, FC 60) for ``(C, H, W)`` >= 4x4.

    Raises:
        IncompatibleModelError: for a shape without three axes or smaller than 4x4.
    """
    shape = check_args("bn_cnn_cifar", num_classes=num_classes, input_shape=input_shape, ndim=3)
    return BNCNN(
        num_classes=num_classes,
        input_shape=shape,
        channels=(16, 16),
        kernel_size=3,
        hidden_sizes=(80, 60),
        name="bn_cnn_cifar",
    )
