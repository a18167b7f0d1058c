"""Local training (the train-alone reference run): one client is FedAvg bit for bit; a client starts from its
own model; a client not sampled keeps its model; the mean client and every client's own local test; exact
resume; determinism."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from fedaug.api import ClientUpdate, RunContext
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.evaluation import evaluate
from fedaug.engine.fairness import client_accuracies
from fedaug.engine.simulation import Simulation
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.local import MODELS_KEY, Local, LocalConfig
from tests.conftest import make_spec
from tests.unit.methods.helpers import (
    assert_same_seed_same_metrics,
    client_context,
    initial_state,
    method_from_yaml,
    mlp_fn,
    payload,
    resumed_and_full,
    run_sim,
    skewed_client,
)


def _ckpt(run_dir: Path, name: str = "latest.pt") -> dict:
    return torch.load(run_dir / "ckpt" / name, weights_only=True)  # type: ignore[no-any-return]


def test_one_client_without_sampling_is_fedavg(tmp_path: Path) -> None:
    # Prepare / Execute: the mean of one model is that model, so FedAvg's global model is the client's own
    _, fedavg_state = run_sim(tmp_path / "fedavg", FedAvg(), num_clients=1, per_round=1, rounds=3)
    Simulation(make_spec(tmp_path / "local", method=Local(), num_clients=1, per_round=1, rounds=3)).run()
    # Assert: the client's model is FedAvg's weights bit for bit, every number FedAvg logs is logged alike
    own = _ckpt(tmp_path / "local")["state"]["extra"][MODELS_KEY][0]
    assert own.keys() == fedavg_state.keys()
    assert all(torch.equal(own[key], fedavg_state[key]) for key in own)
    fedavg_records = read_jsonl(tmp_path / "fedavg" / "metrics.jsonl")
    records = read_jsonl(tmp_path / "local" / "metrics.jsonl")
    for record, expected in zip(records, fedavg_records, strict=True):
        assert {key: record[key] for key in expected} == expected
        assert record["test/client_acc"] == [expected["test/acc"]]
        assert record["test/client_acc_var"] == 0.0


def test_a_client_starts_from_its_own_model_not_the_broadcast() -> None:
    # Prepare: the broadcast holds the initial weights, the client's state another model
    x, y = skewed_client(num=12)
    broadcast, own = initial_state(mlp_fn(), seed=0), initial_state(mlp_fn(), seed=1)
    settings = {"local_epochs": 1, "batch_size": 4, "lr": 0.05, "optimizer": "sgd"}
    # Execute
    update = Local().client_update(payload(broadcast, **settings), client_context(x, y, client_state=own))
    expected = FedAvg().client_update(payload(own, **settings), client_context(x, y))
    # Assert: FedAvg's update started from the own model, kept as the client's next start
    assert all(torch.equal(update.model_state[k], expected.model_state[k]) for k in expected.model_state)
    assert update.client_state is update.model_state


def test_the_server_keeps_each_clients_model_and_never_averages() -> None:
    # Prepare: clients 0 and 2 trained before; client 1 returns in this round
    run = RunContext(num_clients=3, num_classes=3, input_shape=(1,), seed=0, num_rounds=2)
    method = Local()
    start = {"w": torch.zeros(2)}
    state = method.init_server(start, run)
    state.extra[MODELS_KEY] = {0: {"w": torch.tensor([1.0, 1.0])}, 2: {"w": torch.tensor([2.0, 2.0])}}
    before = dict(state.extra[MODELS_KEY])
    # Execute
    new = method.server_update(state, [ClientUpdate(1, 5, {"w": torch.tensor([3.0, 4.0])})], run)
    # Assert
    models = new.extra[MODELS_KEY]
    assert models[0] is before[0] and models[2] is before[2]
    assert torch.equal(models[1]["w"], torch.tensor([3.0, 4.0]))
    assert new.model_state is start and new.round_num == 1
    assert state.extra[MODELS_KEY] == before  # the old state is not changed in place
    evaluated = method.client_eval_states(new, run)
    assert [s["w"].tolist() for s in evaluated] == [[1.0, 1.0], [3.0, 4.0], [2.0, 2.0]]


def test_no_round_changes_the_model_of_a_client_it_did_not_sample(tmp_path: Path) -> None:
    # Prepare: 4 clients, 1 a round, the checkpoint of every round kept
    spec = make_spec(tmp_path, method=Local(), num_clients=4, per_round=1, rounds=4)
    spec = replace(spec, keep_checkpoints=(1, 2, 3, 4))
    # Execute
    Simulation(spec).run()
    # Assert: from round to round only the sampled client's model (server copy and client state) changes
    records = read_jsonl(tmp_path / "metrics.jsonl")
    initial = _ckpt(tmp_path, "round_0001.pt")["state"]["model_state"]
    previous: dict = {}
    previous_states: dict = {}
    for record in records:
        ckpt = _ckpt(tmp_path, f"round_{record['round']:04d}.pt")
        models, states = ckpt["state"]["extra"][MODELS_KEY], ckpt["client_states"]
        assert set(models) == set(previous) | set(record["clients"]) == set(states)
        for client, weights in previous.items():
            sampled = client in record["clients"]
            same_model = all(torch.equal(weights[k], models[client][k]) for k in weights)
            same_state = all(torch.equal(previous_states[client][k], states[client][k]) for k in weights)
            assert same_model == same_state == (not sampled), (record["round"], client)
        assert all(torch.equal(ckpt["state"]["model_state"][k], initial[k]) for k in initial)
        previous, previous_states = models, states


def test_mean_client_and_every_clients_own_local_test(tmp_path: Path) -> None:
    # Prepare: 3 clients, 2 a round (one client may stay untrained), local test splits of 4 samples each
    spec = make_spec(tmp_path, method=Local(), num_clients=3, per_round=2, rounds=2)
    local_test = [idx[:4] for idx in spec.client_indices]
    spec = replace(spec, local_test_indices=local_test)
    # Execute
    Simulation(spec).run()
    # Assert: test/acc is the mean of each client's own model's global-test accuracy; local/acc is client
    # i's own model on client i's split; a client never sampled is the initial model
    record = read_jsonl(tmp_path / "metrics.jsonl")[-1]
    ckpt = _ckpt(tmp_path)
    state = ckpt["state"]
    models = [state["extra"][MODELS_KEY].get(c, state["model_state"]) for c in range(3)]
    model = spec.model_fn()
    accs, local = [], []
    for client, weights in enumerate(models):
        model.load_state_dict(weights)
        accs.append(evaluate(model, spec.test_x, spec.test_y, num_classes=3)["acc"])
        idx = [local_test[client]]
        local.append(float(client_accuracies(model, spec.train_x, spec.train_y, idx)[0]))
    assert record["test/client_acc"] == accs
    assert record["test/acc"] == pytest.approx(sum(accs) / 3, rel=0, abs=1e-15)
    assert record["test/client_acc_min"] == min(accs)
    assert record["local/acc"] == local
    assert record["local/acc_mean"] == pytest.approx(sum(local) / 3, rel=0, abs=1e-15)


def test_resumed_run_is_identical(tmp_path: Path) -> None:
    # 3 clients, 2 a round: clients come back to their own model of an earlier round
    full, cut = resumed_and_full(tmp_path, Local, rounds=4, per_round=2)
    models, cut_models = full["state"]["extra"][MODELS_KEY], cut["state"]["extra"][MODELS_KEY]
    assert models.keys() == cut_models.keys() == cut["client_states"].keys()
    for client, weights in models.items():
        assert all(torch.equal(weights[k], cut_models[client][k]) for k in weights)
        assert all(torch.equal(weights[k], cut["client_states"][client][k]) for k in weights)


def test_same_seed_same_metrics(tmp_path: Path) -> None:
    assert_same_seed_same_metrics(tmp_path, Local, rounds=2, per_round=2)


def test_yaml_holds_the_defaults() -> None:
    method = method_from_yaml("local")
    assert isinstance(method, Local) and method.config == LocalConfig()
