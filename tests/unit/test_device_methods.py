"""Data-sharing and loss-based methods keep their tensors on the run's device (checked on the meta device).

On the meta device any tensor created on the CPU and combined with the run's tensors raises, as it would on a
GPU, so these tests catch device mixing on a CPU-only machine. Data-dependent steps (``.item()``, boolean
masks, ``torch.unique``) do not run on meta; those paths run on the CPU in the method tests and on a GPU in
``tests/gpu``. The random draws stay on the CPU, with the same numbers as before (pinned here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import Tensor

import fedaug.training.loop as local_training
from fedaug import registry
from fedaug.api import ClientContext, ClientData, ClientShare, Payload, RunContext, TrainSettings
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.fedbr import FedBR, FedBRConfig, discriminator
from fedaug.methods.fedmix import FedMix, FedMixConfig, _local_weights
from fedaug.methods.flea.buffer import BufferStream
from fedaug.methods.flea.method import FLea, FLeaConfig, FLeaOfficial
from fedaug.models import build_model
from fedaug.models.base import SplitModel
from fedaug.runtime.device import tensor_devices
from fedaug.runtime.seeding import numpy_rng, torch_generator
from fedaug.training.loop import LossOutput, train_local
from tests.helpers import IMAGE, bn_model

META = torch.device("meta")


def _mlp() -> SplitModel:
    return build_model("mlp", num_classes=3, input_shape=(8,))


def _run(shape: tuple[int, ...], device: torch.device = META) -> RunContext:
    return RunContext(
        num_clients=2,
        num_classes=3,
        input_shape=shape,
        seed=0,
        num_rounds=2,
        input_mean=(0.0,),
        input_std=(1.0,),
        device=device,
    )


def _client(
    model_fn: Callable[[], SplitModel], shape: tuple[int, ...], *, num: int = 12, client_state: Any = None
) -> ClientContext:
    """A client whose data and (workspace) models are on the meta device; its generator is a CPU one."""
    workspaces: dict[str, SplitModel] = {}

    def workspace(key: str) -> SplitModel:
        if key not in workspaces:
            workspaces[key] = model_fn().to(META)
        return workspaces[key]

    x = torch.empty(num, *shape, device=META)
    y = torch.zeros(num, dtype=torch.long, device=META)
    data = ClientData(0, x, y, 3)
    return ClientContext(
        0,
        1,
        data,
        workspace("client"),
        torch.Generator().manual_seed(0),
        _run(shape),
        client_state,
        workspace,
    )


def _step(method: FedAvg, payload: Payload, ctx: ClientContext) -> LossOutput:
    """One local step's transform, loss and backward pass (what ``train_local`` does per batch)."""
    transform = method.batch_transform(payload, ctx)
    loss_fn = method.loss_fn(payload, ctx)
    x, y = ctx.data.x[:4], ctx.data.y[:4]
    if transform is not None:
        x, y = transform(x, y, ctx.generator)
    out: LossOutput = loss_fn(ctx.model, x, y)
    out.loss.backward()  # type: ignore[no-untyped-call]
    return out


def _payload(method: FedAvg, ctx: ClientContext, **extra: Tensor) -> Payload:
    state = method.init_server(ctx.model.state_dict(), ctx.run)
    payload = method.payload(state, 1, TrainSettings())
    payload.extra.update(extra)
    return payload


def _buffer() -> dict[str, Tensor]:
    return {
        "buffer_x": torch.empty(7, 256, device=META),
        "buffer_y": torch.zeros(7, dtype=torch.long, device=META),
    }


def _pool(labels: Tensor) -> dict[str, Tensor]:
    return {"pool_x": torch.empty(labels.shape[0], 8, device=META), "pool_y": labels}


CASES: dict[str, Callable[[], tuple[FedAvg, ClientContext, dict[str, Tensor]]]] = {
    "flea_warmup": lambda: (FLea(), _client(_mlp, (8,)), {}),
    "flea_official_warmup": lambda: (FLeaOfficial(), _client(_mlp, (8,)), {}),
    "flea_beta_mix": lambda: (FLea(), _client(_mlp, (8,)), _buffer()),
    "flea_fixed_mix": lambda: (
        FLea(FLeaConfig(mix_weight=0.3, decor_form="trace")),
        _client(_mlp, (8,)),
        _buffer(),
    ),
    "flea_official_mix": lambda: (FLeaOfficial(), _client(_mlp, (8,)), _buffer()),
    "fedmix_naive": lambda: (FedMix(), _client(_mlp, (8,)), _pool(torch.empty(5, 3, device=META))),
    "fedmix_mafl": lambda: (
        FedMix(FedMixConfig(mode="mafl", mix_weight=0.9)),
        _client(_mlp, (8,)),
        _pool(torch.empty(5, 3, device=META)),
    ),
    "fedbr": lambda: (FedBR(), _client(_mlp, (8,)), _pool(torch.empty(5, 3, device=META))),
    "fedbr_mix_with_local": lambda: (
        FedBR(FedBRConfig(mix_with_local=True)),
        _client(_mlp, (8,)),
        _pool(torch.empty(5, 3, device=META)),
    ),
    "moon_first": lambda: (registry.get("method", "moon")(), _client(_mlp, (8,)), {}),
    "moon_previous": lambda: (
        registry.get("method", "moon")(),
        _client(_mlp, (8,), client_state=_mlp().to(META).state_dict()),
        {},
    ),
    "fedaugmix": lambda: (registry.get("method", "fedaugmix")(), _client(bn_model, IMAGE), {}),
    "fedprox_augmix": lambda: (registry.get("method", "fedprox_augmix")(), _client(bn_model, IMAGE), {}),
    "moon_augmix": lambda: (
        registry.get("method", "moon_augmix")(),
        _client(bn_model, IMAGE, client_state=bn_model().to(META).state_dict()),
        {},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_local_step_computes_on_the_device(case: str) -> None:
    method, ctx, extra = CASES[case]()
    out = _step(method, _payload(method, ctx, **extra), ctx)
    assert out.loss.device == META
    assert tensor_devices(out.logs) <= {META}, case
    grads = [p.grad for p in ctx.model.parameters() if p.grad is not None]
    assert grads and tensor_devices(grads) == {META}


@pytest.mark.parametrize("name", ["flea", "flea_official", "fedmix", "feddata", "fedbr"])
def test_server_state_starts_on_the_runs_device(name: str) -> None:
    method = registry.get("method", name)()
    state = method.init_server(_mlp().to(META).state_dict(), _run((8,)))
    assert tensor_devices(state.extra) == {META}


@pytest.mark.parametrize("name", ["fedmix", "feddata", "fedbr"])
def test_shares_and_the_pool_are_on_the_runs_device(name: str) -> None:
    method = registry.get("method", name)()
    if name == "fedbr":
        method = FedBR(FedBRConfig(average_size=4, num_pseudo=3))
    ctx = _client(_mlp, (8,), num=20)
    state = method.init_server(ctx.model.state_dict(), ctx.run)
    request = method.share_request(state, round_num=0, participants=[], run=ctx.run)
    assert request is not None
    shares = [method.client_share(request, ctx), method.client_share(request, ctx)]
    assert all(tensor_devices(share.extra) == {META} for share in shares)
    pooled = method.receive_shares(state, shares, ctx.run)
    assert tensor_devices(pooled.extra) == {META}
    assert pooled.extra["pool_x"].shape[0] > 0


def test_flea_share_is_on_the_device() -> None:
    # One shared sample: no distance correlation metric (a float of data, which meta cannot give).
    ctx = _client(_mlp, (8,), num=10)
    method = FLea()
    state = method.init_server(ctx.model.state_dict(), ctx.run)
    request = method.share_request(state, round_num=1, participants=[0], run=ctx.run)
    assert request is not None
    share: ClientShare = method.client_share(request, ctx)
    assert share.extra["x"].shape == (1, 256)
    assert tensor_devices(share.extra) == {META}


def test_flea_buffer_from_cpu_shares_is_on_the_cpu() -> None:
    # The server combines on the run's device; on the CPU the bookkeeping is exact as before.
    run = _run((8,), torch.device("cpu"))
    method = FLea()
    state = method.init_server({}, run)
    shares = [
        ClientShare(1, {"x": torch.ones(2, 4), "y": torch.tensor([0, 2])}, {"num_shared": 2.0}),
        ClientShare(0, {"x": torch.zeros(1, 4), "y": torch.tensor([1])}, {"num_shared": 1.0}),
    ]
    extra = method.receive_shares(state, shares, run).extra
    assert extra["buffer_y"].tolist() == [0, 2, 1]
    assert extra["buffer_client"].tolist() == [1, 1, 0]
    assert extra["buffer_round"].tolist() == [0, 0, 0]
    assert tensor_devices({k: v for k, v in extra.items() if isinstance(v, Tensor)}) == {torch.device("cpu")}


def test_mixing_draws_are_the_same_numbers_as_before() -> None:
    lam = FLea()._mix_weights(4, numpy_rng(0, "flea-mix", 1, 0))
    expected = [0.25045719742774963, 0.057808391749858856, 0.30129626393318176, 0.03153092414140701]
    assert lam.device.type == "cpu" and torch.equal(lam, torch.tensor(expected))
    weights = _local_weights(FedMixConfig(mix_per_sample=True), 3, numpy_rng(0, "fedmix-mix", 1, 0))
    expected = [0.6500652432441711, 0.40235018730163574, 0.8324764966964722]
    assert weights.device.type == "cpu" and torch.equal(weights, torch.tensor(expected))


def test_buffer_stream_draws_on_the_cpu_and_indexes_on_the_buffers_device() -> None:
    on_cpu = BufferStream(5, torch_generator(0, "flea-buffer", 1, 0)).take(7)
    assert on_cpu.tolist() == [1, 0, 3, 2, 4, 3, 1]
    on_meta = BufferStream(5, torch_generator(0, "flea-buffer", 1, 0), META).take(7)
    assert on_meta.device == META and on_meta.shape == (7,)


def test_fedbr_discriminator_is_initialised_on_the_cpu_as_before() -> None:
    disc = discriminator(3, 2, torch_generator(0, "fedbr-disc", 1, 0))
    expected = [[0.4102145731449127, -0.4969528913497925, 0.3296605944633484]]
    first = disc[0]
    assert isinstance(first, torch.nn.Linear)
    assert torch.equal(first.weight[:1], torch.tensor(expected))
    assert tensor_devices(disc) == {torch.device("cpu")}


def test_train_local_gathers_batches_on_the_datas_device(monkeypatch: pytest.MonkeyPatch) -> None:
    orders: list[Tensor] = []

    def record(order: Tensor, batch_size: int) -> Iterator[Tensor]:
        del batch_size
        orders.append(order)
        return iter(())  # no step: a meta loss has no value to check for finiteness

    monkeypatch.setattr(local_training, "batch_indices", record)
    ctx = _client(_mlp, (8,))
    metrics = train_local(
        ctx.model,
        ctx.data,
        loss_fn=local_training.cross_entropy_loss,
        settings=TrainSettings(local_epochs=2),
        generator=torch.Generator().manual_seed(0),
    )
    assert metrics == {"train/steps": 0.0}
    assert [order.device for order in orders] == [META, META]
