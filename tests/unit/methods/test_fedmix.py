"""FedMix: FedAvg reductions, shared averages, NaiveMix by hand, the MAFL Taylor loss, resume, validation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fedaug.api import ClientContext, Payload, TrainSettings
from fedaug.config.load import build_dataclass
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.simulation import Simulation
from fedaug.errors import ConfigError
from fedaug.methods.fedmix import FedMix, FedMixConfig, group_means
from fedaug.methods.parts.losses import soft_cross_entropy
from tests.conftest import make_spec
from tests.helpers import killed_in_round
from tests.unit.methods.helpers import (
    assert_equals_fedavg,
    client_context,
    initial_state,
    method_from_yaml,
    mlp_fn,
    skewed_client,
)


def test_naive_mix_with_all_weight_on_local_samples_is_fedavg_exactly(tmp_path: Path) -> None:
    # The averages are shared and drawn, but from their own streams: FedAvg's batches, bit for bit.
    assert_equals_fedavg(tmp_path, FedMix(FedMixConfig(mix_weight=1.0)), rounds=2, per_round=2)


def test_mafl_with_no_weight_on_the_averages_is_fedavg(tmp_path: Path) -> None:
    assert_equals_fedavg(tmp_path, FedMix(FedMixConfig(mode="mafl", mix_weight=1.0)), rounds=2, per_round=2)


def test_group_means_by_hand() -> None:
    # Prepare: 5 samples, groups of 2: two full groups, the fifth (shuffled) sample is not shared.
    x = torch.arange(10.0).view(5, 2)
    y = torch.tensor([0, 1, 1, 2, 0])
    # Execute
    x_bar, y_bar = group_means(x, y, 3, 2, torch.Generator().manual_seed(0))
    # Assert
    order = torch.randperm(5, generator=torch.Generator().manual_seed(0))
    expected_x = x[order[:4]].view(2, 2, 2).mean(dim=1)
    expected_y = F.one_hot(y[order[:4]], 3).float().view(2, 2, 3).mean(dim=1)
    assert torch.equal(x_bar, expected_x) and torch.equal(y_bar, expected_y)
    assert torch.allclose(y_bar.sum(dim=1), torch.ones(2))


def test_every_client_shares_averages_once(tmp_path: Path) -> None:
    # Prepare: 3 clients of 25 samples; groups of 10 give 2 averages each (5 samples stay private).
    sim = Simulation(make_spec(tmp_path, method=FedMix(), rounds=2, per_round=1, samples_per_client=25))
    # Execute
    sim.run()
    # Assert
    ckpt = sim.store.load_checkpoint()
    assert ckpt is not None
    pool_x, pool_y = ckpt["state"]["extra"]["pool_x"], ckpt["state"]["extra"]["pool_y"]
    assert pool_x.shape == (6, 8) and pool_y.shape == (6, 3)
    assert torch.allclose(pool_y.sum(dim=1), torch.ones(6))
    assert torch.all((pool_y * 10).round() == pool_y * 10)  # label shares of a group of 10
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert all(r["fedmix/exposure"] == 1.0 and r["fedmix/pool_size"] == 6.0 for r in records)
    assert records[0]["fedmix/bytes_up_per_client"] == 2 * 8 * 4 + 2 * 3 * 4


def _pool_payload(pool_x: torch.Tensor, pool_y: torch.Tensor, state: dict[str, torch.Tensor]) -> Payload:
    train = TrainSettings(local_epochs=1, batch_size=4)
    return Payload(1, state, train, {"pool_x": pool_x, "pool_y": pool_y})


def _context(num: int = 4) -> ClientContext:
    x, y = skewed_client(num=num)
    return client_context(x, y)


def test_naive_mix_by_hand() -> None:
    # Prepare: a pool of one average, so every partner is (x_bar, y_bar); fixed local weight 0.25.
    ctx = _context()
    pool_x, pool_y = torch.ones(1, 8), torch.tensor([[0.2, 0.3, 0.5]])
    mix = FedMix(FedMixConfig(mix_weight=0.25)).batch_transform(_pool_payload(pool_x, pool_y, {}), ctx)
    assert mix is not None
    x, y = ctx.data.x, ctx.data.y
    # Execute
    x_mix, y_mix = mix(x, y, torch.Generator())
    # Assert
    torch.testing.assert_close(x_mix, 0.25 * x + 0.75)
    torch.testing.assert_close(y_mix, 0.25 * F.one_hot(y, 3).float() + 0.75 * pool_y)


@pytest.mark.parametrize(("per_sample", "distinct"), [(False, 1), (True, 4)])
def test_one_beta_weight_per_batch_or_per_sample(per_sample: bool, distinct: int) -> None:
    # Local zeros and a pool of ones: row i of the mixed batch is 1 - l_i everywhere.
    ctx = _context()
    method = FedMix(FedMixConfig(mix_per_sample=per_sample))
    mix = method.batch_transform(_pool_payload(torch.ones(3, 8), torch.eye(3), {}), ctx)
    assert mix is not None
    x_mix, _ = mix(torch.zeros(4, 8), ctx.data.y, torch.Generator())
    weights = 1 - x_mix[:, 0]
    assert len(set(weights.tolist())) == distinct and bool(((weights > 0) & (weights < 1)).all())


def _mixup_and_mafl(lam: float) -> tuple[float, float]:
    """Exact global Mixup loss and the MAFL loss for one pool average, in float64."""
    model_fn = mlp_fn(hidden_sizes=(16,))
    state = {k: v.double() for k, v in initial_state(model_fn).items()}
    x, y = skewed_client(num=4)
    ctx = client_context(x.double(), y, model_fn=model_fn)
    ctx.model.double().load_state_dict(state)
    x, y = ctx.data.x, ctx.data.y
    x_bar = torch.randn(1, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y_bar = torch.tensor([[0.1, 0.6, 0.3]], dtype=torch.float64)
    method = FedMix(FedMixConfig(mode="mafl", mix_weight=1 - lam))
    mafl = method.loss_fn(_pool_payload(x_bar, y_bar, state), ctx)(ctx.model, x, y).loss
    target = (1 - lam) * F.one_hot(y, 3).double() + lam * y_bar
    mixup = soft_cross_entropy(ctx.model((1 - lam) * x + lam * x_bar), target)
    return mixup.item(), mafl.detach().item()


def test_mafl_loss_is_a_first_order_approximation_of_global_mixup() -> None:
    # The error of a first-order Taylor expansion in lambda shrinks quadratically: halving lambda quarters it.
    errors = [abs(mixup - mafl) for mixup, mafl in map(_mixup_and_mafl, (0.02, 0.01))]
    assert 0 < errors[1] < 1e-3
    assert errors[0] / errors[1] == pytest.approx(4.0, rel=0.2)


def test_mafl_taylor_term_is_trained() -> None:
    # Prepare: the Taylor term depends on the weights through the input gradient (double backward).
    ctx = _context()
    ctx.model.load_state_dict(initial_state(mlp_fn()))
    loss_fn = FedMix(FedMixConfig(mode="mafl", mix_weight=0.9)).loss_fn(
        _pool_payload(torch.randn(2, 8), torch.eye(3)[:2], {}), ctx
    )
    # Execute
    out = loss_fn(ctx.model, ctx.data.x, ctx.data.y)
    out.loss.backward()
    # Assert
    assert {"ce", "ce_mean", "taylor"} <= set(out.logs)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in ctx.model.parameters())


def test_fedmix_resumes_identically(tmp_path: Path) -> None:
    Simulation(make_spec(tmp_path / "full", method=FedMix(), rounds=4)).run()
    # Killed in round 3 after its first client: the pool and the streams must survive the restart.
    killed = killed_in_round(FedMix, kill_round=3, calls_before_kill=1)
    with pytest.raises(KeyboardInterrupt):
        Simulation(make_spec(tmp_path / "cut", method=killed, rounds=4)).run()
    Simulation(make_spec(tmp_path / "cut", method=FedMix(), rounds=4)).run()
    for name in ("metrics.jsonl", "summary.json"):
        assert (tmp_path / "cut" / name).read_text() == (tmp_path / "full" / name).read_text()


def test_mafl_runs_in_the_engine(tmp_path: Path) -> None:
    Simulation(make_spec(tmp_path, method=FedMix(FedMixConfig(mode="mafl", mix_weight=0.9)), rounds=2)).run()
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert all("train/taylor" in r for r in records)


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"method\.mode must be one of naive, mafl, got 'fedmix'"):
        FedMixConfig(mode="fedmix")
    with pytest.raises(ConfigError, match=r"method\.mean_group_size must be >= 1, got 0"):
        FedMixConfig(mean_group_size=0)
    with pytest.raises(ConfigError, match=r"method\.mix_beta must be a finite number > 0, got -1"):
        build_dataclass(FedMixConfig, {"mix_beta": -1}, path="method")
    with pytest.raises(ConfigError, match=r"method\.mix_weight must be a finite number in \[0, 1\], got 1.5"):
        FedMixConfig(mix_weight=1.5)


def test_yaml_preset_has_the_paper_defaults() -> None:
    method = method_from_yaml("fedmix")
    assert isinstance(method, FedMix) and method.config == FedMixConfig()
