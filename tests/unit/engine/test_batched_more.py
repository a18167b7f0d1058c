"""engine.batched_clients for FedMix and the Fed-AugMix variants: equal to the sequential loop in float64.

FedBR (a discriminator trained inside its loss) falls back to the sequential loop with the reason.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedaug import registry
from fedaug.engine import simulation
from fedaug.engine.simulation import Simulation
from fedaug.methods.fedaugmix import FedAugMixConfig, js_consistency_loss
from fedaug.methods.fedavg import FedAvg
from fedaug.models.base import SplitModel
from fedaug.training.loop import BatchableLoss, ClientTensors, LossOutput, as_batchable
from tests.helpers import IMAGE, image_spec
from tests.unit.engine.helpers import assert_same_run, bn_mlp_float64, unequal_float64_spec
from tests.unit.methods.helpers import client_context, initial_state, mlp_fn, payload


def _bn_image_mlp() -> SplitModel:
    """:func:`bn_mlp_float64` with a Flatten in front, for 1 x 2 x 4 images."""
    model = bn_mlp_float64()
    return SplitModel([nn.Sequential(nn.Flatten(), *model.blocks[0])], model.pool, model.classifier)


def _unequal_image_spec(run_dir: Path, method: FedAvg) -> Any:
    """:func:`unequal_float64_spec` (clients of 20, 13 and 9 samples, float64) with image inputs."""
    spec = unequal_float64_spec(run_dir, method)
    run = replace(spec.run, input_shape=IMAGE, input_mean=(0.5,), input_std=(2.0,))
    return replace(
        spec,
        train_x=spec.train_x.view(-1, *IMAGE),
        test_x=spec.test_x.view(-1, *IMAGE),
        run=run,
        model_fn=_bn_image_mlp,
    )


def _assert_batched_equals_sequential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: FedAvg, make_spec: Any
) -> None:
    """Three rounds sequentially and with batched clients: train metrics to 1e-9, final weights to 1e-10,
    and every round really trained batched (no silent fallback)."""
    batched_rounds = []
    train_round_batched = simulation.train_round_batched

    def counted(*args: Any) -> Any:
        batched_rounds.append(args[1].round_num)
        return train_round_batched(*args)

    Simulation(make_spec(tmp_path / "seq", method)).run()
    monkeypatch.setattr(simulation, "train_round_batched", counted)
    Simulation(replace(make_spec(tmp_path / "bat", method), batched_clients=True)).run()
    assert batched_rounds == [1, 2, 3]
    assert_same_run(tmp_path / "seq", tmp_path / "bat")


@pytest.mark.parametrize(
    "options",
    [{}, {"mix_per_sample": True}, {"mode": "mafl", "mix_weight": 0.9}, {"mode": "mafl"}],
    ids=["naive", "naive-per-sample", "mafl-fixed", "mafl-beta"],
)
def test_batched_fedmix_equals_the_sequential_loop_with_unequal_clients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    # The pool holds 3 averages (groups of 10 from clients of 20, 13 and 9 samples), so every round mixes.
    # NaiveMix mixes in its batch transform (per client, before stacking) and trains on soft labels; MAFL
    # draws its pool partners and weights per step and takes a per-sample input gradient inside the loss
    # (torch.func.grad nested in the engine's vmap(grad), batch norm updating its statistics in between).
    cls = registry.get("method", "fedmix")
    method = cls(cls.config_cls(**options))
    _assert_batched_equals_sequential(tmp_path, monkeypatch, method, unequal_float64_spec)


def _variant_names() -> list[str]:
    """Every registered Fed-AugMix method (``fedaugmix`` and the ``<base>_augmix`` variants)."""
    return [n for n in registry.available("method") if n == "fedaugmix" or n.endswith("_augmix")]


@pytest.mark.parametrize("name", _variant_names())
def test_batched_augmix_variants_equal_the_sequential_loop_with_unequal_clients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # The AugMix views are the batch transform's (per client, from its own generator); the JS term is added
    # to the base method's own batchable loss (FedLC's per-client shift, FedNTD's frozen teacher, MOON's
    # previous model, ...): every variant batches because every base method does.
    method = registry.get("method", name)()
    _assert_batched_equals_sequential(tmp_path, monkeypatch, method, _unequal_image_spec)


def test_batched_augmix_without_loss_scaling_equals_the_sequential_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    method = registry.get("method", "fedaugmix")(FedAugMixConfig(loss_scaling=False, severity=1.0))
    _assert_batched_equals_sequential(tmp_path, monkeypatch, method, _unequal_image_spec)


@pytest.mark.parametrize(
    ("name", "options", "reason"),
    [
        ("fedbr", {"average_size": 4}, "method 'fedbr' has a loss hook that is not a BatchableLoss"),
    ],
)
def test_methods_that_cannot_batch_fall_back_with_the_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str, options: dict[str, Any], reason: str
) -> None:
    # FedBR trains a per-client discriminator with its own Adam inside the loss: state the batched engine
    # does not carry between steps.
    cls = registry.get("method", name)
    method = cls(cls.config_cls(**options))
    Simulation(_unequal_image_spec(tmp_path / "seq", method)).run()
    with caplog.at_level(logging.WARNING):
        Simulation(replace(_unequal_image_spec(tmp_path / "bat", method), batched_clients=True)).run()
    assert caplog.text.count(f"training clients one by one ({reason})") == 1
    seq = (tmp_path / "seq" / "metrics.jsonl").read_text()
    assert (tmp_path / "bat" / "metrics.jsonl").read_text() == seq


@pytest.mark.parametrize("name", _variant_names())
def test_augmix_variant_loss_is_batchable_exactly_when_its_base_loss_is(name: str) -> None:
    base_name = "fedavg" if name == "fedaugmix" else name.removesuffix("_augmix")
    x, y = torch.randn(12, 8, generator=torch.Generator().manual_seed(0)), torch.arange(12) % 3
    ctx = client_context(x, y)
    state = initial_state(mlp_fn())
    ctx.model.load_state_dict(state)
    broadcast = payload(state)
    base = as_batchable(registry.get("method", base_name)().loss_fn(broadcast, ctx))
    variant = registry.get("method", name)().loss_fn(broadcast, ctx)
    assert isinstance(variant, BatchableLoss) == (base is not None)
    if base is not None:
        assert isinstance(variant, BatchableLoss)
        assert variant.client.keys() == base.client.keys()
        for key, value in base.client.items():
            assert torch.equal(variant.client[key], value)


def test_js_loss_passes_the_base_constants_and_draws_for_the_originals() -> None:
    # Prepare: a base loss with a per-client constant and per-step draws that records what it was given.
    sizes: list[int] = []

    def draws(size: int) -> ClientTensors:
        sizes.append(size)
        return {"noise": torch.full((size,), 0.25)}

    def fn(model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors) -> LossOutput:
        loss = F.cross_entropy(model(x) + client["bias"] + step["noise"][:, None], y)
        return LossOutput(loss, {"ce": loss.detach()})

    base = BatchableLoss(fn, {"bias": torch.tensor([0.0, 1.0, -1.0])}, draws)
    model = mlp_fn()()
    x, y = torch.randn(15, 8, generator=torch.Generator().manual_seed(1)), torch.arange(15) % 3
    config = FedAugMixConfig()
    # Execute
    wrapped = js_consistency_loss(base, config)
    out = wrapped(model, x, y)
    # Assert: the base saw the 5 originals (one draw of 5), its constant is passed on, and the value is the
    # same as wrapping the plain (non-batchable) call of the base loss.
    assert isinstance(wrapped, BatchableLoss) and wrapped.draws is not None
    assert sizes == [5]
    assert wrapped.client is base.client
    plain = js_consistency_loss(lambda m, xs, ys: base(m, xs, ys), config)
    assert not isinstance(plain, BatchableLoss)
    assert torch.equal(plain(model, x, y).loss, out.loss)
    assert sizes == [5, 5]


FALLBACKS = {
    "fedbr": "method 'fedbr' has a loss hook that is not a BatchableLoss",
    "fedgen": "method 'fedgen' has a loss hook that is not a BatchableLoss",
    "fedzdac": "method 'fedzdac' has a client step of its own",
    "qffl": "method 'qffl' has a client step of its own",
    "feddyn": "method 'feddyn' has a client step of its own",
    "scaffold": "method 'scaffold' has a client step of its own",
    "local": "method 'local' has a client step of its own",
    "centralized": "method 'centralized' has a client step of its own",
}


@pytest.mark.parametrize("name", registry.available("method"))
def test_which_methods_batch_and_why_the_others_fall_back(
    tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The list in engine/batched.py's docstring, docs/guide/gpu.md and docs/guide/speed.md: every registered
    # method either trains batched or names why it does not (a new method is checked here the day it is
    # registered).
    spec = replace(image_spec(tmp_path, name, torch.device("cpu"), rounds=2), batched_clients=True)
    # FedBR and FedGen train with plain CE (and batch) until their pool / generator exists: get there.
    options = {"fedbr": {"average_size": 4}, "fedgen": {"warmup_rounds": 1}}.get(name)
    if options is not None:
        cls = registry.get("method", name)
        spec = replace(spec, method=cls(cls.config_cls(**options)))
    with caplog.at_level(logging.WARNING, logger="fedaug.engine.simulation"):
        Simulation(spec).run()
    fallback = [r.getMessage() for r in caplog.records if "training clients one by one" in r.getMessage()]
    if name in FALLBACKS:
        assert fallback == [f"engine.batched_clients: training clients one by one ({FALLBACKS[name]})"]
    else:
        assert fallback == []
