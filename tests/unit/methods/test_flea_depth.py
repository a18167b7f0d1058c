"""FLea's sharing depth (``method.split_layer``): a bad layer names every valid one with what it shares, and
the run log states the buffer's memory (bytes per shared sample x the most samples it holds)."""

from __future__ import annotations

import logging

import pytest

from fedaug.api import RunContext
from fedaug.errors import IncompatibleModelError
from fedaug.methods.flea import depth
from fedaug.methods.flea.method import FLea, FLeaConfig
from fedaug.models import build_model

MODELS = {
    # name: (input shape, classes, {layer: (activation shape, bytes per shared sample with its int64 label)})
    "lenet5": ((1, 28, 28), 10, {1: ((16, 5, 5), 16 * 5 * 5 * 4 + 8), 2: ((120,), 120 * 4 + 8)}),
    "harnet": (
        (1, 128, 3),
        6,
        {1: ((128, 20, 7), 128 * 20 * 7 * 4 + 8), 2: ((256, 9, 9), 256 * 9 * 9 * 4 + 8)},
    ),
}


def _run(input_shape: tuple[int, ...], classes: int, sizes: tuple[int, ...], per_round: int) -> RunContext:
    return RunContext(
        num_clients=len(sizes),
        num_classes=classes,
        input_shape=input_shape,
        seed=0,
        num_rounds=2,
        client_sizes=sizes,
        clients_per_round=per_round,
    )


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_bad_split_layer_names_every_valid_layer_with_what_it_shares(name: str) -> None:
    input_shape, classes, layers = MODELS[name]
    model = build_model(name, num_classes=classes, input_shape=input_shape)
    flea = FLea(FLeaConfig(split_layer=7))
    with pytest.raises(IncompatibleModelError) as info:
        flea.check(model, _run(input_shape, classes, (50, 40), 1))
    message = str(info.value)
    assert message.startswith("method.split_layer: split layer 7 does not exist in ")
    assert "valid layers: -1..3" in message and "\n" not in message
    assert f"-1 (raw input {list(input_shape)}," in message
    for layer, (shape, size) in layers.items():
        assert f"{layer} ({list(shape)}, {size:,} B)" in message


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("layer", [1, 2])
def test_the_run_log_states_the_buffers_memory_at_the_split_layer(
    name: str, layer: int, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: five clients, two per round; alpha = 0.1 shares 6, 5, 4, 1, 0 samples (floor)
    input_shape, classes, layers = MODELS[name]
    shape, size = layers[layer]
    model = build_model(name, num_classes=classes, input_shape=input_shape)
    run = _run(input_shape, classes, (40, 65, 9, 50, 12), per_round=2)
    # Execute
    with caplog.at_level(logging.INFO, logger="fedaug.methods.flea.method"):
        FLea(FLeaConfig(split_layer=layer, buffer_rounds=3)).check(model, run)
    # Assert: the two largest shares (6 and 5) in each of 3 rounds: 33 samples
    memory = depth.buffer_memory(model, layer, run, share_fraction=0.1, buffer_rounds=3)
    assert (memory.shape, memory.bytes_per_sample, memory.max_samples) == (shape, size, 33)
    assert memory.total_bytes == 33 * size
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        f"flea: split layer {layer} of {type(model).__name__} shares {list(shape)} per sample "
        f"({size:,} B with its label); the buffer holds at most 33 samples (2 clients x 3 rounds) = "
        f"{33 * size / 1e6:.2f} MB"
    ]


def test_without_a_stated_round_size_the_bound_counts_every_client() -> None:
    input_shape, classes, _ = MODELS["lenet5"]
    model = build_model("lenet5", num_classes=classes, input_shape=input_shape)
    memory = depth.buffer_memory(
        model, 0, _run(input_shape, classes, (40, 65, 9), per_round=0), share_fraction=0.5, buffer_rounds=1
    )
    assert (memory.max_samples, memory.clients) == (20 + 32 + 4, 3)
