"""Every registered model: split points round-trip, shapes, parameter counts, errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from fedaug import registry
from fedaug.errors import ConfigError, IncompatibleModelError, RegistryError
from fedaug.models import SplitModel, build_model

# Per-sample input shape each model is tested with: its paper's dataset shape where cheap, 16x16 images for
# the deep CIFAR models (their pools are global, so the split logic is the same at 32x32).
INPUT_SHAPES: dict[str, tuple[int, ...]] = {
    "harnet": (1, 128, 3),
    "audionet": (2, 64, 344),
    "mobilenet_v2_cifar": (3, 16, 16),
    "lenet5": (1, 28, 28),
    "resnet18_cifar": (3, 16, 16),
    "resnet50_cifar": (3, 16, 16),
    "bn_cnn_mnist": (1, 28, 28),
    "bn_cnn_cifar": (3, 32, 32),
    "convnet": (3, 16, 16),
    "mlp": (1, 8, 8),
}
BATCH_SIZES = {"resnet50_cifar": 1}
MODEL_NAMES = registry.available("model")
_CACHE: dict[str, SplitModel] = {}


@pytest.fixture(autouse=True, scope="module")
def _single_thread() -> Iterator[None]:
    """Batches of 1-3 gain nothing from intra-op threads, and threads oversubscribe a busy CI machine."""
    num_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(num_threads)


def _model(name: str) -> SplitModel:
    """One eval-mode instance per model, built once (ResNet-50 takes ~0.4 s to build)."""
    if name not in _CACHE:
        torch.manual_seed(0)
        _CACHE[name] = build_model(name, num_classes=10, input_shape=INPUT_SHAPES[name])
    model = _CACHE[name].eval()
    model.zero_grad(set_to_none=True)
    return model


def _input(name: str, batch_size: int | None = None) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(batch_size or BATCH_SIZES.get(name, 2), *INPUT_SHAPES[name], generator=generator)


def test_every_registered_model_has_a_test_shape() -> None:
    assert set(MODEL_NAMES) == set(INPUT_SHAPES)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_decode_of_encode_equals_forward_at_every_split(name: str) -> None:
    # Prepare
    model, x = _model(name), _input(name)
    with torch.no_grad():
        expected = model(x)
        for layer in model.split_layers:
            # Execute
            h = model.encode(x, layer)
            # Assert
            assert h.shape[1:] == model.activation_shape(INPUT_SHAPES[name], layer), f"layer {layer}"
            torch.testing.assert_close(model.decode(h, layer), expected, rtol=0, atol=0)
    assert expected.shape == (x.shape[0], 10)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_invalid_split_layers_raise(name: str) -> None:
    model = _model(name)
    x = _input(name, 1)
    for layer in (-2, model.num_blocks):
        with pytest.raises(IncompatibleModelError, match="valid layers: -1"):
            model.encode(x, layer)
        with pytest.raises(IncompatibleModelError, match="valid layers: -1"):
            model.decode(x, layer)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_penultimate_feeds_the_classifier(name: str) -> None:
    model, x = _model(name), _input(name)
    with torch.no_grad():
        features = model.penultimate(x)
        assert features.shape == (x.shape[0], model.classifier.in_features)
        torch.testing.assert_close(model.classifier(features), model(x), rtol=0, atol=0)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_gradients_flow_through_encode(name: str) -> None:
    model = _model(name)
    x = _input(name, 1).requires_grad_(True)
    layer = model.default_split
    model.encode(x, layer).square().mean().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    first_block_grads = [p.grad for p in model.blocks[0].parameters()]
    assert first_block_grads and all(g is not None for g in first_block_grads)
    assert all(p.grad is None for p in model.classifier.parameters())


@pytest.mark.parametrize("name", sorted(set(MODEL_NAMES) - {"resnet50_cifar"}))
def test_eval_output_does_not_depend_on_the_batch(name: str) -> None:
    model, x = _model(name), _input(name, 3)
    with torch.no_grad():
        torch.testing.assert_close(model(x[:1]), model(x)[:1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("name", "num_classes", "input_shape", "expected"),
    [
        ("harnet", 6, (1, 128, 3), 691_974),  # printed in the official FLea HAR log
        ("audionet", 10, (2, 64, 344), 25_602),
        ("mobilenet_v2_cifar", 10, (3, 32, 32), 2_296_922),
        ("lenet5", 10, (1, 28, 28), 61_706),
        ("resnet18_cifar", 10, (3, 32, 32), 11_173_962),
        ("resnet50_cifar", 10, (3, 32, 32), 23_520_842),
        ("bn_cnn_mnist", 10, (1, 28, 28), 29_034),
        ("bn_cnn_cifar", 10, (3, 32, 32), 90_302),
        ("convnet", 10, (3, 32, 32), 2_904_970),
        ("mlp", 10, (1, 8, 8), 64 * 256 + 256 + 256 * 10 + 10),
    ],
)
def test_parameter_counts(name: str, num_classes: int, input_shape: tuple[int, ...], expected: int) -> None:
    if num_classes == 10 and input_shape == INPUT_SHAPES[name]:
        model = _model(name)
    else:
        model = build_model(name, num_classes=num_classes, input_shape=input_shape)
    assert sum(p.numel() for p in model.parameters()) == expected


@pytest.mark.parametrize(
    ("name", "input_shape", "shape"),
    [
        ("harnet", (1, 128, 3), (128, 20, 7)),
        ("audionet", (2, 64, 344), (16, 16, 86)),
        ("mobilenet_v2_cifar", (3, 32, 32), (16, 32, 32)),
    ],
)
def test_flea_default_split_activation_shapes(
    name: str, input_shape: tuple[int, ...], shape: tuple[int, ...]
) -> None:
    model = _model(name)
    assert model.default_split == 1
    assert model.activation_shape(input_shape, model.default_split) == shape


def test_harnet_shapes_follow_the_official_padding() -> None:
    model = _model("harnet")
    shapes = [model.activation_shape((1, 128, 3), layer) for layer in range(4)]
    assert shapes == [(64, 43, 5), (128, 20, 7), (256, 9, 9), (256, 3, 11)]
    assert model.classifier.in_features == 8448
    nine_sensors = build_model("harnet", num_classes=6, input_shape=(1, 128, 9))
    assert nine_sensors.classifier.in_features == 256 * 3 * 17


def test_mobilenet_layers_map_to_the_official_indices() -> None:
    # Our layer k + 1 is the official layer k; block 0 is the stem and block 18 the 1x1 conv to 1280.
    model = _model("mobilenet_v2_cifar")
    official = {
        0: (16, 32, 32),
        2: (24, 32, 32),
        3: (32, 16, 16),
        6: (64, 8, 8),
        13: (160, 4, 4),
        16: (320, 4, 4),
    }
    for official_layer, shape in official.items():
        assert model.activation_shape((3, 32, 32), official_layer + 1) == shape
    assert model.activation_shape((3, 32, 32), 0) == (32, 32, 32)
    assert model.activation_shape((3, 32, 32), 18) == (1280, 4, 4)


def test_convnet_width_and_mlp_hidden_sizes_are_options() -> None:
    convnet = build_model("convnet", num_classes=10, input_shape=(3, 32, 32), width=8)
    assert convnet.classifier.in_features == 36 * 8
    linear = build_model("mlp", num_classes=3, input_shape=(16,), hidden_sizes=())
    assert list(linear.split_layers) == [-1]
    assert linear(torch.randn(4, 16)).shape == (4, 3)
    with pytest.raises(ConfigError, match="valid options: width"):
        build_model("convnet", num_classes=10, input_shape=(3, 32, 32), depth=3)


def test_unknown_model_name_lists_the_valid_ones() -> None:
    with pytest.raises(RegistryError, match="harnet") as info:
        build_model("no_such_net", num_classes=10, input_shape=(3, 32, 32))
    assert all(name in str(info.value) for name in MODEL_NAMES)


@pytest.mark.parametrize(
    ("name", "num_classes", "input_shape"),
    [
        ("harnet", 6, (3, 128, 3)),  # not one input channel
        ("harnet", 6, (1, 32, 3)),  # too short for four strided convs
        ("lenet5", 10, (1, 8, 8)),
        ("mobilenet_v2_cifar", 10, (32, 32)),
        ("convnet", 10, (3, 4, 4)),
        ("audionet", 0, (2, 64, 344)),
        ("mlp", 10, (0, 8)),
    ],
)
def test_builders_reject_unusable_inputs(name: str, num_classes: int, input_shape: tuple[int, ...]) -> None:
    with pytest.raises(IncompatibleModelError, match=name):
        build_model(name, num_classes=num_classes, input_shape=input_shape)


@pytest.mark.parametrize("name", ["harnet", "audionet", "bn_cnn_cifar", "lenet5", "mlp"])
def test_one_training_step_changes_the_weights(name: str) -> None:
    model = build_model(name, num_classes=10, input_shape=INPUT_SHAPES[name]).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.classifier.weight.detach().clone()
    loss = torch.nn.functional.cross_entropy(model(_input(name, 4)), torch.arange(4))
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss) and not torch.equal(before, model.classifier.weight)


def test_activation_shape_probes_with_the_model_dtype() -> None:
    model = build_model("lenet5", num_classes=10, input_shape=(1, 28, 28)).double()
    assert model.activation_shape((1, 28, 28), 2) == (120,)
    assert model.training  # the mode is restored
