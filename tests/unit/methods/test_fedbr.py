"""FedBR: FedAvg reduction, label-free pseudo-data, the contrastive log-ratio by hand, the min-max steps."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedaug.api import Payload, TrainSettings
from fedaug.config.load import build_dataclass
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.simulation import Simulation
from fedaug.errors import ConfigError
from fedaug.methods.fedbr import FedBR, FedBRConfig, contrast_log_ratio, discriminator
from tests.conftest import make_spec
from tests.unit.methods.helpers import (
    assert_equals_fedavg,
    client_context,
    initial_state,
    mlp_fn,
    skewed_client,
)


def test_zero_weights_are_fedavg_exactly(tmp_path: Path) -> None:
    # The pseudo-data are shared and the discriminator trains, but no gradient reaches the model.
    method = FedBR(FedBRConfig(contrastive_mu=0.0, uniform_lambda=0.0, average_size=5))
    assert_equals_fedavg(tmp_path, method, rounds=2, per_round=2)


def test_server_keeps_num_pseudo_label_free_averages(tmp_path: Path) -> None:
    # Prepare: 3 clients x 20 samples, averages of 5 -> 4 per client, 12 in all; the server keeps 5.
    method = FedBR(FedBRConfig(num_pseudo=5, average_size=5))
    sim = Simulation(make_spec(tmp_path, method=method, rounds=1, per_round=1))
    # Execute
    sim.run()
    # Assert
    ckpt = sim.store.load_checkpoint()
    assert ckpt is not None
    pool_x, pool_y = ckpt["state"]["extra"]["pool_x"], ckpt["state"]["extra"]["pool_y"]
    assert pool_x.shape == (5, 8)
    assert torch.equal(pool_y, torch.full((5, 3), 1 / 3))  # no label information leaves a client
    record = read_jsonl(tmp_path / "metrics.jsonl")[0]
    assert record["fedbr/pool_size"] == 5.0
    assert {"train/uniform", "train/contrast"} <= record.keys()


def test_contrast_log_ratio_by_hand() -> None:
    # Identity discriminator, tau = 2: e1 = e2 gives cos 1, e1 orthogonal to e3 gives cos 0.
    h_local = torch.tensor([[1.0, 0.0]])
    h_global = torch.tensor([[2.0, 0.0]])
    h_data = torch.tensor([[0.0, 3.0]])
    value = contrast_log_ratio(nn.Identity(), h_local, h_global, h_data, temperature=2.0)
    assert value.item() == pytest.approx(2.0 - math.log(math.exp(2.0) + 1.0))


def test_discriminator_is_seeded_and_leaves_the_global_rng_alone() -> None:
    state = torch.random.get_rng_state()
    first = discriminator(4, 6, torch.Generator().manual_seed(1))
    second = discriminator(4, 6, torch.Generator().manual_seed(1))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters(), strict=True))


def _payload(state: dict[str, torch.Tensor], pool_x: torch.Tensor) -> Payload:
    extra = {"pool_x": pool_x, "pool_y": torch.full((pool_x.shape[0], 3), 1 / 3)}
    return Payload(1, state, TrainSettings(local_epochs=1, batch_size=4), extra)


def test_loss_terms_by_hand_on_one_batch() -> None:
    # Prepare: a pool of one pseudo-sample; the uniform term is the soft CE of f(p) against 1/3.
    x, y = skewed_client(num=4)
    ctx = client_context(x, y, model_fn=mlp_fn())
    state = initial_state(mlp_fn())
    ctx.model.load_state_dict(state)
    pool_x = torch.ones(1, 8)
    pay = Payload(
        1,
        state,
        TrainSettings(local_epochs=1, batch_size=4),
        {"pool_x": pool_x, "pool_y": torch.full((1, 3), 1 / 3)},
    )
    loss_fn = FedBR(FedBRConfig(contrastive_mu=0.0, uniform_lambda=1.0)).loss_fn(pay, ctx)
    # Execute
    out = loss_fn(ctx.model, x, y)
    # Assert
    logits_p = ctx.model(pool_x.expand(4, 8))
    expected_uniform = -(F.log_softmax(logits_p, dim=1) / 3).sum(dim=1).mean()
    expected_ce = F.cross_entropy(ctx.model(x), y)
    assert out.logs["uniform"].item() == pytest.approx(expected_uniform.item(), rel=1e-6)
    assert out.loss.item() == pytest.approx((expected_ce + expected_uniform).item(), rel=1e-6)


def test_mixing_with_local_samples_halves_the_targets() -> None:
    x, y = skewed_client(num=4)
    ctx = client_context(x, y, model_fn=mlp_fn())
    state = initial_state(mlp_fn())
    ctx.model.load_state_dict(state)
    pay = Payload(
        1,
        state,
        TrainSettings(local_epochs=1, batch_size=4),
        {"pool_x": torch.zeros(1, 8), "pool_y": torch.full((1, 3), 1 / 3)},
    )
    loss_fn = FedBR(FedBRConfig(contrastive_mu=0.0, mix_with_local=True)).loss_fn(pay, ctx)
    out = loss_fn(ctx.model, x, y)
    target = (torch.full((4, 3), 1 / 3) + F.one_hot(y, 3).float()) / 2
    expected = -(target * F.log_softmax(ctx.model(x / 2), dim=1)).sum(dim=1).mean()
    assert out.logs["uniform"].item() == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.parametrize(
    ("key", "value"), [("num_pseudo", 0), ("temperature", -1.0), ("uniform_lambda", float("nan"))]
)
def test_config_validation_names_the_field(key: str, value: float) -> None:
    with pytest.raises(ConfigError, match=key):
        build_dataclass(FedBRConfig, {key: value}, path="method")
