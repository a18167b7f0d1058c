"""The analytic FLOP counter: hand counts of tiny layers, FlopCounterMode's counts where it is right."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from fedaug.models import build_model
from fedaug.models.flops import count_flops, layer_macs


def flop_counter_mode(model: nn.Module, input_shape: tuple[int, ...], *, train: bool) -> float:
    """PyTorch's count per image (batch 2): forward + backward of the loss, or the forward alone."""
    x = torch.randn(2, *input_shape)
    with FlopCounterMode(display=False) as counter:
        if train:
            F.cross_entropy(model(x), torch.tensor([0, 1])).backward()  # type: ignore[no-untyped-call]
        else:
            with torch.no_grad():
                model(x)
    return counter.get_total_flops() / 2


def test_a_dense_conv_fed_the_images_has_no_input_gradient() -> None:
    # Prepare: 2 -> 3 channels, 3x3, same padding, on 4x4: 48 outputs x 2 inputs x 9 taps = 864 MACs
    conv = nn.Conv2d(2, 3, 3, padding=1)
    # Execute
    flops = count_flops(conv, (2, 4, 4))
    # Assert: forward 2 x 864; backward: the weight gradient only
    assert (flops.forward, flops.backward, flops.train) == (1728, 1728, 3456)


def test_a_depthwise_conv_counts_one_input_channel_per_output() -> None:
    # Prepare: a 1x1 conv (2 -> 4, 5x5: 100 outputs x 2 = 200 MACs), then a depthwise 3x3 conv (groups = 4:
    # 100 outputs x 1 x 9 = 900 MACs), whose input needs a gradient
    model = nn.Sequential(nn.Conv2d(2, 4, 1), nn.Conv2d(4, 4, 3, padding=1, groups=4))
    # Execute
    flops = count_flops(model, (2, 5, 5))
    # Assert: forward 400 + 1800; backward 400 (weight) + 1800 x 2 (weight and input)
    assert (flops.forward, flops.backward) == (2200, 4000)


def test_linear_layers_and_frozen_weights() -> None:
    # Prepare: 6 -> 4 (24 MACs) and 4 -> 3 (12 MACs); then the same with the first layer frozen
    model = nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 3))
    # Execute
    trained = count_flops(model, (6,))
    model[0].requires_grad_(False)
    frozen = count_flops(model, (6,))
    # Assert: forward 48 + 24; backward 48 + 24 x 2; frozen first layer: nothing computed for it, and the
    # second layer's input needs no gradient
    assert (trained.forward, trained.backward) == (72, 96)
    assert (frozen.forward, frozen.backward) == (72, 24)


def test_the_count_leaves_the_model_as_it_was() -> None:
    model = build_model("bn_cnn_cifar", num_classes=10, input_shape=(3, 32, 32))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    count_flops(model, (3, 32, 32))
    assert model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not model._forward_hooks and not any(m._forward_hooks for m in model.modules())


@pytest.mark.parametrize(
    ("name", "shape"), [("bn_cnn_cifar", (3, 32, 32)), ("lenet5", (3, 32, 32)), ("harnet", (1, 128, 3))]
)
def test_models_without_grouped_convs_agree_with_flop_counter_mode(name: str, shape: tuple[int, ...]) -> None:
    model = build_model(name, num_classes=10, input_shape=shape)
    assert count_flops(model, shape).train == flop_counter_mode(model, shape, train=True)


def test_mobilenet_v2_backward_is_not_counted_dense() -> None:
    # Prepare
    model = build_model("mobilenet_v2_cifar", num_classes=10, input_shape=(3, 32, 32))
    # Execute
    flops = count_flops(model, (3, 32, 32))
    # Assert: the forward agrees with FlopCounterMode (its forward formula knows groups); the backward is
    # about 2x the forward (0.545 GFLOP in all), where FlopCounterMode counts 3.9
    assert flops.forward == flop_counter_mode(model, (3, 32, 32), train=False) == 182_309_888
    assert flops.train == 545_160_192
    assert flop_counter_mode(model, (3, 32, 32), train=True) > 7 * flops.train


def test_an_uncounted_layer_type_is_an_error_naming_the_counted_ones() -> None:
    with pytest.raises(TypeError, match=r"no FLOP count for ReLU; counted: .*Conv2d.*Linear"):
        layer_macs(nn.ReLU(), torch.zeros(1))
