"""Centralized training (the pooled-data reference run): one client is FedAvg bit for bit; every round takes
exactly the optimizer steps FedAvg's sampled clients take (counted, on unequal clients); the pool is the
training set; clients do not train and the pool is never broadcast; the step budget of ``train_local``;
exact resume; determinism."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.optim.optimizer import register_optimizer_step_post_hook

from fedaug.api import ServerState
from fedaug.config.schema import TrainConfig
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.simulation import Simulation, SimulationSpec
from fedaug.methods.centralized import Centralized, CentralizedConfig
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.parts.data_pool import DataPool
from fedaug.training.loop import (
    batch_indices,
    cross_entropy_loss,
    snapshot_state,
    steps_per_epoch,
    train_local,
)
from tests.conftest import make_spec
from tests.unit.methods.helpers import (
    assert_equals_fedavg,
    assert_same_seed_same_metrics,
    client_context,
    initial_state,
    method_from_yaml,
    mlp_fn,
    payload,
    resumed_and_full,
    skewed_client,
)

SIZES = (5, 17, 38)  # B = 8: 1, 2 (the 17th sample joins the second batch) and 5 batches an epoch


def test_one_client_without_sampling_is_fedavg(tmp_path: Path) -> None:
    # the pool is the client's data in its order, S = E * b(n) is one whole epoch count, and the batches come
    # from client 0's stream: FedAvg's round, bit for bit
    train = TrainConfig(rounds=3, local_epochs=2, batch_size=8)
    assert_equals_fedavg(tmp_path, Centralized(), num_clients=1, per_round=1, rounds=3, train=train)


def unequal_spec(run_dir: Path, method: FedAvg | Centralized) -> SimulationSpec:
    """3 clients of SIZES samples, 2 a round, 2 local epochs of batches of 8."""
    spec = make_spec(
        run_dir,
        method=method,
        num_clients=3,
        samples_per_client=20,
        per_round=2,
        rounds=3,
        train=TrainConfig(rounds=3, local_epochs=2, batch_size=8),
    )
    bounds = torch.cumsum(torch.tensor((0, *SIZES)), 0).tolist()
    indices = [torch.arange(bounds[i], bounds[i + 1]) for i in range(3)]
    return replace(spec, client_indices=indices, run=replace(spec.run, client_sizes=SIZES))


class StepCounter:
    """Counts every optimizer step (a global hook) and, as a round observer, the steps of each round."""

    def __init__(self) -> None:
        self.total = 0
        self.per_round: list[int] = []

    def step(self, *_: object) -> None:
        self.total += 1

    def start(self, first_round: int, records: list[dict[str, Any]]) -> None:
        del first_round, records

    def round(self, record: dict[str, Any], timing: dict[str, Any]) -> None:
        del record, timing
        self.per_round.append(self.total - sum(self.per_round))

    def finish(self, summary: dict[str, Any]) -> None:
        del summary


def counted_round_steps(spec: SimulationSpec) -> list[int]:
    """The optimizer steps each round of ``spec``'s run takes (clients' and server's alike)."""
    counter = StepCounter()
    handle = register_optimizer_step_post_hook(counter.step)
    try:
        Simulation(replace(spec, observers=(counter,))).run()
    finally:
        handle.remove()
    return counter.per_round


def test_every_round_takes_exactly_fedavgs_optimizer_steps(tmp_path: Path) -> None:
    # Execute: count the optimizer steps of FedAvg's clients and of the pooled model, round by round
    fedavg_steps = counted_round_steps(unequal_spec(tmp_path / "fedavg", FedAvg()))
    pooled_steps = counted_round_steps(unequal_spec(tmp_path / "centralized", Centralized()))
    # Assert: per round S = sum over the sampled clients of E * b(n_i), b = (1, 2, 5) for sizes (5, 17, 38)
    records = read_jsonl(tmp_path / "centralized" / "metrics.jsonl")
    expected = [2 * sum((1, 2, 5)[c] for c in r["clients"]) for r in records]
    assert pooled_steps == fedavg_steps == expected
    assert [r["centralized/steps"] for r in records] == expected
    assert [r["clients"] for r in records] == [
        r["clients"] for r in read_jsonl(tmp_path / "fedavg" / "metrics.jsonl")
    ]


def test_the_pool_is_the_training_set_and_stays_on_the_server(tmp_path: Path) -> None:
    # Prepare / Execute
    spec = unequal_spec(tmp_path, Centralized())
    Simulation(spec).run()
    # Assert: every client's samples once, in client order; the payload carries no pool
    state = torch.load(tmp_path / "ckpt" / "latest.pt", weights_only=True)["state"]
    pool = DataPool.from_extra(state["extra"])
    order = torch.cat(spec.client_indices)
    assert torch.equal(pool.x, spec.train_x[order]) and torch.equal(pool.y, spec.train_y[order])
    record = read_jsonl(tmp_path / "metrics.jsonl")[-1]
    assert record["centralized/pool_size"] == sum(SIZES)
    message = Centralized().payload(ServerState(**state), 4, TrainConfig().settings(4))
    assert message.extra == {}


def test_a_client_does_not_train_and_reports_fedavgs_steps() -> None:
    x, y = skewed_client(num=17)
    start = initial_state(mlp_fn())
    update = Centralized().client_update(payload(start, local_epochs=3, batch_size=8), client_context(x, y))
    assert update.model_state is start
    assert update.metrics == {"train/steps": 3 * 2}
    assert update.num_examples == 17


@given(num_examples=st.integers(0, 200), batch_size=st.integers(1, 40))
def test_steps_per_epoch_counts_the_batches_train_local_makes(num_examples: int, batch_size: int) -> None:
    batches = list(batch_indices(torch.arange(num_examples), batch_size))
    assert steps_per_epoch(num_examples, batch_size) == len(batches)


@pytest.mark.parametrize("max_steps", [1, 4, 5, 11])
def test_a_step_budget_is_whole_epochs_then_a_cut_one(max_steps: int) -> None:
    # Prepare: 17 samples in batches of 8 make 2 steps an epoch (the 17th joins the second batch)
    x, y = skewed_client(num=17)
    data = client_context(x, y).data
    settings = payload(initial_state(mlp_fn()), local_epochs=1, batch_size=8, lr=0.05, optimizer="sgd").train

    def trained(**budget: int) -> tuple[dict[str, torch.Tensor], float]:
        model = mlp_fn()()
        model.load_state_dict(initial_state(mlp_fn()))
        gen = torch.Generator().manual_seed(7)
        metrics = train_local(
            model, data, loss_fn=cross_entropy_loss, settings=settings, generator=gen, **budget
        )
        return snapshot_state(model), metrics["train/steps"]

    # Execute
    state, steps = trained(max_steps=max_steps)
    # Assert: exactly the budget; a budget of whole epochs is those epochs bit for bit
    assert steps == max_steps
    if max_steps % 2 == 0:
        settings = replace(settings, local_epochs=max_steps // 2)
        whole, _ = trained()
        assert all(torch.equal(state[k], whole[k]) for k in whole)


def test_resumed_run_is_identical(tmp_path: Path) -> None:
    full, cut = resumed_and_full(tmp_path, Centralized, rounds=4, per_round=2)
    weights, cut_weights = full["state"]["model_state"], cut["state"]["model_state"]
    assert all(torch.equal(cut_weights[k], weights[k]) for k in weights)


def test_same_seed_same_metrics(tmp_path: Path) -> None:
    assert_same_seed_same_metrics(tmp_path, Centralized, rounds=2, per_round=2)


def test_yaml_holds_the_defaults() -> None:
    method = method_from_yaml("centralized")
    assert isinstance(method, Centralized) and method.config == CentralizedConfig()
