"""FedGen: FedAvg during warm-up, generator shapes, server training against the global model, determinism."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from fedaug.api import ClientContext, ClientUpdate, Payload, RunContext, ServerState, TrainSettings
from fedaug.engine.checkpoint import read_jsonl
from fedaug.errors import ConfigError, IncompatibleModelError
from fedaug.methods.fedgen import (
    ConditionalGenerator,
    FedGen,
    FedGenConfig,
    diversity_loss,
)
from tests.unit.methods.helpers import assert_equals_fedavg, initial_state, mlp_fn, run_sim


def test_warmup_longer_than_the_run_is_fedavg_exactly(tmp_path: Path) -> None:
    assert_equals_fedavg(tmp_path, FedGen(FedGenConfig(warmup_rounds=5)), rounds=2, per_round=2)


@pytest.mark.parametrize("shape", [(1, 128, 3), (3, 32, 32), (1, 28, 28), (8,), (2, 64, 344)])
def test_generator_output_has_the_input_shape(shape: tuple[int, ...]) -> None:
    gen = ConditionalGenerator(shape, 6, 4, 8, torch.Generator().manual_seed(0))
    out = gen(torch.tensor([0, 5]), torch.randn(2, 4))
    assert out.shape == (2, *shape)


def test_generator_rejects_other_shapes_and_leaves_the_global_rng_alone() -> None:
    with pytest.raises(IncompatibleModelError, match=r"\[C, H, W\] or \[D\].*\[4, 4\]"):
        ConditionalGenerator((4, 4), 3, 4, 8, torch.Generator())
    state = torch.random.get_rng_state()
    a = ConditionalGenerator((8,), 3, 4, 8, torch.Generator().manual_seed(3))
    b = ConditionalGenerator((8,), 3, 4, 8, torch.Generator().manual_seed(3))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_diversity_loss_by_hand() -> None:
    # Two samples at L1 distance 2 (mean over 2 dims: 1), noises at squared distance 4 (mean over 1 dim: 4):
    # pairs (0,1) and (1,0) give 4 each, the diagonal 0, so the mean is 2 and the loss exp(-2).
    samples = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    noise = torch.tensor([[0.0], [2.0]])
    assert diversity_loss(samples, noise).item() == pytest.approx(torch.exp(torch.tensor(-2.0)).item())


def test_server_trains_the_generator_to_fool_the_global_model() -> None:
    # Prepare: a global MLP and FedGen without warm-up; one aggregation triggers generator training.
    model_fn = mlp_fn()
    state = initial_state(model_fn)
    workspaces: dict[str, torch.nn.Module] = {}
    run = RunContext(
        num_clients=1,
        num_classes=3,
        input_shape=(8,),
        seed=0,
        num_rounds=1,
        workspace=lambda key: workspaces.setdefault(key, model_fn()),  # type: ignore[arg-type,return-value]
    )
    # output_scale 10: an untrained MLP needs inputs beyond +-1 to give every class a confident logit.
    config = FedGenConfig(warmup_rounds=0, generator_steps=150, diversity_weight=0.0, output_scale=10.0)
    method = FedGen(config)
    server = method.init_server(state, run)
    # Execute
    after = method.server_update(server, [ClientUpdate(0, 1, state)], run)
    # Assert: the global model assigns generated samples to their conditioning class.
    metrics = method.round_metrics(after)
    assert metrics["fedgen/gen_acc"] == 1.0
    assert metrics["fedgen/gen_ce"] < 0.1
    assert (
        after.extra["generator"].keys()
        == ConditionalGenerator((8,), 3, 32, 64, torch.Generator()).state_dict().keys()
    )


def test_needs_a_server_workspace() -> None:
    run = RunContext(num_clients=1, num_classes=3, input_shape=(8,), seed=0, num_rounds=1)
    method = FedGen(FedGenConfig(warmup_rounds=0))
    state = initial_state(mlp_fn())
    with pytest.raises(IncompatibleModelError, match="server"):
        method.server_update(ServerState(0, state), [ClientUpdate(0, 1, state)], run)


def test_generated_samples_join_local_training_deterministically(tmp_path: Path) -> None:
    method = FedGen(FedGenConfig(warmup_rounds=1, generator_steps=5))
    first, _ = run_sim(tmp_path / "a", method, rounds=3, per_round=2)
    second, _ = run_sim(tmp_path / "b", method, rounds=3, per_round=2)
    assert first == second
    records = read_jsonl(tmp_path / "a" / "metrics.jsonl")
    assert "train/gen_ce" not in records[0] and "train/gen_ce" in records[1]
    assert records[0]["fedgen/bytes_down_extra"] > 0  # the generator is trained after round 1 already


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"method\.noise_dim must be >= 1, got 0"):
        FedGenConfig(noise_dim=0)
    with pytest.raises(ConfigError, match=r"method\.gen_weight"):
        FedGenConfig(gen_weight=-1.0)


def test_generated_samples_stay_within_output_scale_whatever_the_diversity_loss_asks() -> None:
    # Unbounded, 200 steps of the diversity loss alone grow the samples without limit (seen on UCI-HAR:
    # std 577 against the data's 0.4); tanh * output_scale keeps every value inside [-0.5, 0.5].
    gen = ConditionalGenerator((1, 128, 3), 6, 32, 64, torch.Generator().manual_seed(0), output_scale=0.5)
    opt = torch.optim.Adam(gen.parameters(), lr=1e-2)
    stream = torch.Generator().manual_seed(1)
    for _ in range(200):
        z = torch.randn(32, 32, generator=stream)
        samples = gen(torch.randint(6, (32,), generator=stream), z)
        opt.zero_grad()
        diversity_loss(samples, z).backward()  # type: ignore[no-untyped-call]
        opt.step()
    assert samples.abs().max().item() <= 0.5
    assert samples.abs().max().item() > 0.4  # the loss does push outwards: the bound is what holds it


def test_output_scale_must_be_positive() -> None:
    with pytest.raises(ConfigError, match=r"method\.output_scale must be a finite number > 0, got 0\.0"):
        FedGenConfig(output_scale=0.0)


def test_generated_batches_leave_the_clients_batchnorm_statistics_alone() -> None:
    # Prepare: a BN model in train mode and a round-2 payload carrying a generator.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3)).train()
    reference = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    reference.load_state_dict(model.state_dict())
    reference.train()
    method = FedGen(FedGenConfig(warmup_rounds=1, noise_dim=4, generator_width=8))
    weights = ConditionalGenerator((8,), 3, 4, 8, torch.Generator().manual_seed(0)).state_dict()
    run = RunContext(num_clients=1, num_classes=3, input_shape=(8,), seed=0, num_rounds=2)
    ctx = ClientContext(0, 2, None, None, torch.Generator(), run)  # type: ignore[arg-type]
    loss = method.loss_fn(Payload(2, {}, TrainSettings(), {"generator": weights}), ctx)
    x, y = torch.randn(16, 8), torch.randint(3, (16,))
    # Execute: the FedGen loss (real and generated batch) and the real batch alone
    out = loss(model, x, y)
    reference(x)
    # Assert: the running statistics saw the real batch only; the generated CE was computed
    assert torch.equal(model[1].running_mean, reference[1].running_mean)
    assert torch.equal(model[1].running_var, reference[1].running_var)
    assert model.training and model[1].training and "gen_ce" in out.logs
