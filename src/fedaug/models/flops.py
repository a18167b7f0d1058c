"""FLOPs of one training image, counted from the layers' shapes (convolutions, grouped ones too, and linears).

``torch.utils.flop_counter.FlopCounterMode`` counts the weight gradient of a grouped convolution as if the
convolution were dense (its formula for the weight gradient ignores ``groups``), so for MobileNetV2's
depthwise convolutions it counts each 3x3 weight gradient ``channels`` times over: 3.9 GFLOP an image forward
+ backward instead of 0.55 (issue #65). This counter reads the shapes instead.

Convention (the usual one, and FlopCounterMode's on dense layers, with which this counter agrees exactly on
models without grouped convolutions; ``tests/unit/models/test_flops.py``):

* one multiply-accumulate is 2 FLOPs; only convolutions and linear layers are counted (bias additions,
  batch norm, activations, pooling and the loss are left out: a few percent at most of these models);
* forward: ``2 x MACs``, where a convolution's MACs are ``output elements x in_channels / groups x kernel
  area`` and a linear layer's ``output elements x in_features``;
* backward: the weight gradient costs as much as the forward, and so does the input gradient, which is not
  computed for a layer whose input needs no gradient (the first layer, fed the images): about 2 x forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

COUNTED = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)
"""The layer types whose FLOPs are counted."""


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one image (see the module's convention).

    Attributes:
        forward: the forward pass's FLOPs.
        backward: the backward pass's FLOPs (weight and input gradients).
    """

    forward: float
    backward: float

    @property
    def train(self) -> float:
        """Forward + backward: the FLOPs one training image costs."""
        return self.forward + self.backward


def layer_macs(layer: nn.Module, output: Tensor) -> int:
    """Multiply-accumulates of ``layer`` (a :data:`COUNTED` type) producing ``output``."""
    if isinstance(layer, nn.Linear):
        return output.numel() * layer.in_features
    if isinstance(layer, nn.Conv1d | nn.Conv2d | nn.Conv3d):
        return output.numel() * (layer.in_channels // layer.groups) * math.prod(layer.kernel_size)
    raise TypeError(f"no FLOP count for {type(layer).__name__}; counted: {[t.__name__ for t in COUNTED]}")


def count_flops(model: nn.Module, input_shape: tuple[int, ...], *, batch: int = 2) -> FlopCount:
    """FLOPs of one image of ``input_shape`` through ``model``, from one forward pass of ``batch`` random
    images.

    The pass runs in eval mode (batch-norm statistics stay untouched) with gradients on, so that each layer
    sees whether its input needs a gradient; the model's mode is restored afterwards.
    """
    forward = backward = 0
    handles = []

    def hook(layer: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> None:
        nonlocal forward, backward
        flops = 2 * layer_macs(layer, output)
        weight = layer.weight
        weight_grad = isinstance(weight, Tensor) and weight.requires_grad
        forward += flops
        backward += flops * (int(weight_grad) + int(inputs[0].requires_grad))

    for layer in model.modules():
        if isinstance(layer, COUNTED):
            handles.append(layer.register_forward_hook(hook))
    was_training = model.training
    parameter = next(model.parameters(), None)
    x = torch.randn(batch, *input_shape, device=None if parameter is None else parameter.device)
    try:
        model.eval()
        with torch.enable_grad():
            model(x)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return FlopCount(forward=forward / batch, backward=backward / batch)
