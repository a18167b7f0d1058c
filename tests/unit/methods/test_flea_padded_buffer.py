"""FLea's padded buffer, built once per round in the layout of the local activations, trains bit for bit as
the contiguous buffer rebuilt for every client did."""

from __future__ import annotations

import pytest
import torch

from fedaug.api import ClientContext, ClientData, Payload, RunContext, ShareRequest, TrainSettings
from fedaug.methods.flea import method as flea_method
from fedaug.methods.flea.buffer import FLeaBuffer
from fedaug.methods.flea.loss import activation_format, padded_buffer
from fedaug.methods.flea.method import FLea, FLeaConfig, FLeaOfficial
from fedaug.models import build_model
from fedaug.models.base import SplitModel

SHAPE = (3, 16, 16)
METHODS = {"flea": lambda: FLea(FLeaConfig(share_fraction=0.5)), "flea_official": FLeaOfficial}


def _round_two(
    name: str, channels_last: bool, clients: int = 2
) -> tuple[list[dict[str, torch.Tensor]], FLea]:
    """Round 2 of ``clients`` clients of the CIFAR-10 BN-CNN (channels-last or not) with a buffer shared by
    client 0 in round 1: every client's trained state and its logged metrics as tensors, and the method."""
    torch.manual_seed(0)
    workspaces: dict[str, SplitModel] = {}

    def workspace(key: str) -> SplitModel:
        if key not in workspaces:
            model = build_model("bn_cnn_cifar", num_classes=10, input_shape=SHAPE)
            if channels_last:  # engine.channels_last: all (this model's CPU default)
                model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
            workspaces[key] = model
        return workspaces[key]

    flea = METHODS[name]()
    run = RunContext(num_clients=clients, num_classes=10, input_shape=SHAPE, seed=0, num_rounds=2)
    gen = torch.Generator().manual_seed(1)
    data = [
        ClientData(c, torch.randn(20, *SHAPE, generator=gen), (torch.arange(20) + c) % 10, 10)
        for c in range(clients)
    ]
    state = {k: v.clone() for k, v in workspace("client").state_dict().items()}

    def context(client: int) -> ClientContext:
        generator = torch.Generator().manual_seed(client)
        return ClientContext(
            client, 2, data[client], workspace("client"), generator, run, workspace=workspace
        )

    share = flea.client_share(ShareRequest(1, [0], state), context(0))
    extra = FLeaBuffer(share.extra["x"], share.extra["y"]).to_extra()
    payload = Payload(2, state, TrainSettings(local_epochs=2, batch_size=8, lr=1e-2), extra)
    results = []
    for client in range(clients):
        update = flea.client_update(payload, context(client))
        metrics = {k: torch.tensor(v) for k, v in update.metrics.items() if isinstance(v, float)}
        results.append({**update.model_state, **metrics})
    return results, flea


@pytest.mark.parametrize("name", list(METHODS))
def test_the_round_buffer_in_the_activations_layout_trains_as_before(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    after, flea = _round_two(name, channels_last=True)
    assert flea._padded is not None  # the round's buffer, channels-last as the BN-CNN's activations
    assert flea._padded[3]["buffer_x"].is_contiguous(memory_format=torch.channels_last)
    with monkeypatch.context() as patch:  # as before: a contiguous buffer, padded again for every client
        patch.setattr(
            flea_method, "activation_format", lambda model, layer, features: torch.contiguous_format
        )
        patch.setattr(FLea, "padded", lambda self, buffer, memory_format: padded_buffer(buffer))
        before, _ = _round_two(name, channels_last=True)
    for old, new in zip(before, after, strict=True):
        assert old.keys() == new.keys()
        for key in old:
            assert torch.equal(old[key], new[key]), key
    assert not torch.equal(after[0]["classifier.weight"], after[1]["classifier.weight"])  # clients differ


def test_activation_format_follows_the_encoder() -> None:
    model = build_model("bn_cnn_cifar", num_classes=10, input_shape=SHAPE)
    x = torch.randn(2, *SHAPE)
    assert activation_format(model, 0, model.encode(x, 0)) == torch.contiguous_format
    model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    features = model.encode(x, 0)
    assert features.is_contiguous(memory_format=torch.channels_last)
    assert activation_format(model, 0, features) == torch.channels_last
    assert activation_format(model, -1, x) == torch.contiguous_format  # the raw input, as stored
    flat = model.encode(x, 2)  # after the first fully connected block: 2-D
    assert activation_format(model, 2, flat) == torch.contiguous_format


def test_padded_buffer_is_built_once_per_buffer() -> None:
    flea = FLea()
    buffer = FLeaBuffer(torch.randn(5, 4, 3, 3), torch.arange(5))
    first = flea.padded(buffer, torch.channels_last)
    assert first["buffer_x"].shape == (8, 4, 3, 3)
    assert first["buffer_x"].is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(first["buffer_x"][:5], buffer.x) and torch.equal(first["buffer_y"][:5], buffer.y)
    assert not first["buffer_x"][5:].any() and not first["buffer_y"][5:].any()
    assert flea.padded(FLeaBuffer(buffer.x, buffer.y), torch.channels_last) is first  # the round's clients
    assert flea.padded(buffer, torch.contiguous_format) is not first
    new_round = FLeaBuffer(buffer.x.clone(), buffer.y.clone())
    assert flea.padded(new_round, torch.contiguous_format) is not first
