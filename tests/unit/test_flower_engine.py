"""Every registered method through the Flower adapter equals the in-process engine, round for round.

The ServerApp side (FlowerEngine, NodeLink, node discovery) and the real ClientApp run in this process over
:class:`fedaug.flower.loopback.LoopbackGrid`, which delivers each message through Flower's protobuf
serialisation to a node with its own persistent ``Context`` (as a SuperNode keeps it). Flower's Ray
simulation itself is covered by ``test_flower_simulation.py``; the TLS deployment by
``test_flower_tls_demo.py``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("flwr")

from fedaug import registry
from fedaug.api import TrainSettings
from fedaug.config.identity import run_dir_for
from fedaug.config.load import load_config
from fedaug.config.schema import ExperimentConfig
from fedaug.engine import simulation
from fedaug.engine.checkpoint import read_checkpoint, read_jsonl
from fedaug.errors import ClientError, FedaugError, IncompatibleModelError
from fedaug.flower import client_app
from fedaug.flower.client_store import ClientStateStore, run_tag, store_root
from fedaug.flower.loopback import LoopbackGrid, task_identity
from fedaug.flower.server_app import serve
from fedaug.runs.runner import run_experiment
from fedaug.training import loop as local_training

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _task_identity() -> Iterator[None]:
    """Messages read the run/node identity that Flower's runtime sets per process."""
    client_app.client_host.cache_clear()
    with task_identity():
        yield


def loopback(num_nodes: int, *, fail_on: str | None = None) -> LoopbackGrid:
    return LoopbackGrid(client_app.app, num_nodes, fail_on=fail_on)


def tiny_config(tmp_path: Path, method: str, **extra: str) -> ExperimentConfig:
    overrides = {
        "out_dir": str(tmp_path),
        "partition.num_clients": "4",
        "train.clients_per_round": "3",
        "train.rounds": "2",
        "engine.num_threads": "1",
        "engine.progress": "false",
        "method": method,
        **extra,
    }
    return load_config([REPO / "configs" / "smoke.yaml"], [f"{k}={v}" for k, v in overrides.items()])


def metrics(config: ExperimentConfig) -> list[dict]:
    return [json.loads(line) for line in (run_dir_for(config) / "metrics.jsonl").read_text().splitlines()]


def node_states(config: ExperimentConfig) -> dict[int, Any]:
    """Each client's state as its node keeps it after the client's last round (its newest state file)."""
    root = store_root(config)
    states = {}
    for folder in sorted(root.iterdir()) if root.exists() else []:
        store = ClientStateStore(folder, run_tag(config), int(folder.name))
        states[store.client_id] = store.load(max(store.rounds()), required=True)
    return states


_ZDA = {
    "model": "bn_cnn_mnist",  # Fed-ZDA inverts BatchNorm statistics: the tiny MLP has none
    "data.shape": "[1, 16, 16]",
    "method.start_round": "1",
    "method.gen_iterations": "5",
    "method.samples_per_class": "2",
}
SMALLER = {
    "ccvr": {"method.virtual_per_class": "50", "method.calibrate_every_round": "true"},
    "fedzdac": _ZDA,
    "fedzdas": _ZDA,
}
"""Per-method options that fit a method to the tiny setting and keep its test short."""


@pytest.mark.parametrize("name", registry.available("method"))
def test_method_on_flower_equals_engine(tmp_path: Path, name: str) -> None:
    # Prepare
    config = tiny_config(tmp_path, name, **SMALLER.get(name, {}))
    flower = dataclasses.replace(config, name="smoke-flower")
    grid = loopback(num_nodes=4)
    try:
        run_experiment(config)
    except IncompatibleModelError as exc:  # e.g. Fed-ZDA needs BatchNorm, the tiny MLP has none
        pytest.skip(f"the engine refuses the tiny config: {exc}")
    # Execute
    serve(grid, [flower], fresh=False, node_timeout=5)
    # Assert: every logged number of every round is identical (accuracy, losses, method metrics)
    assert metrics(flower) == metrics(config)
    assert len(metrics(flower)) == 2
    final_engine = read_checkpoint(run_dir_for(config) / "ckpt" / "latest.pt")
    final_flower = read_checkpoint(run_dir_for(flower) / "ckpt" / "latest.pt")
    for key, value in final_engine["state"]["model_state"].items():
        assert torch.equal(value, final_flower["state"]["model_state"][key]), key
    assert grid.sent.count("query.partition") == 4


def test_local_keeps_the_engines_client_models_on_flower(tmp_path: Path) -> None:
    """``local``'s result is a model per client: the server's copies after a Flower run are the engine's,
    and each node keeps its own (the client state), which the server's checkpoint does not hold."""
    # Prepare
    config = tiny_config(tmp_path, "local", **{"train.rounds": "3"})
    flower = dataclasses.replace(config, name="smoke-flower")
    grid = loopback(num_nodes=4)
    run_experiment(config)
    # Execute
    serve(grid, [flower], fresh=False, node_timeout=5)
    # Assert
    engine = read_checkpoint(run_dir_for(config) / "ckpt" / "latest.pt")
    on_flower = read_checkpoint(run_dir_for(flower) / "ckpt" / "latest.pt")
    models, flower_models = (
        engine["state"]["extra"]["local_models"],
        on_flower["state"]["extra"]["local_models"],
    )
    assert models.keys() == flower_models.keys() == set(engine["client_states"])
    for client, weights in models.items():
        assert all(torch.equal(weights[k], flower_models[client][k]) for k in weights), client
    # the evaluation of every client's model (cached while it is unchanged, engine/eval_cache.py) is the same
    records = read_jsonl(run_dir_for(config) / "metrics.jsonl")
    flower_records = read_jsonl(run_dir_for(flower) / "metrics.jsonl")
    tested = [{k: v for k, v in r.items() if k.startswith("test/")} for r in records]
    assert tested == [{k: v for k, v in r.items() if k.startswith("test/")} for r in flower_records]
    assert all(len(r["test/client_acc"]) == config.partition.num_clients for r in records)
    assert on_flower["client_states"] == {}
    kept = node_states(flower)
    assert kept.keys() == models.keys()
    for client, weights in kept.items():
        assert all(torch.equal(weights[k], models[client][k]) for k in weights), client


def test_client_state_stays_on_the_node(tmp_path: Path) -> None:
    """MOON's previous local model is kept in the node's state store, not sent to the server."""
    # Prepare
    config = tiny_config(tmp_path, "moon", **{"train.rounds": "3"})
    grid = loopback(num_nodes=4)
    # Execute
    serve(grid, [config], fresh=False, node_timeout=5)
    # Assert
    trained = {c for r in metrics(config) for c in r["clients"]}
    kept = node_states(config)
    assert set(kept) == trained
    ckpt = read_checkpoint(run_dir_for(config) / "ckpt" / "latest.pt")
    assert ckpt["client_states"] == {}
    assert all(set(state) == set(ckpt["state"]["model_state"]) for state in kept.values())


def test_client_failure_names_round_client_and_method(tmp_path: Path) -> None:
    # Prepare
    config = tiny_config(tmp_path, "fedavg")
    grid = loopback(num_nodes=4, fail_on="train")
    # Execute / Assert
    with pytest.raises(ClientError, match=r"round 1, client \d, method 'fedavg': RuntimeError: disk full"):
        serve(grid, [config], fresh=False, node_timeout=5)


def test_missing_nodes_are_reported(tmp_path: Path) -> None:
    # Prepare
    config = tiny_config(tmp_path, "fedavg")
    # Execute / Assert
    with pytest.raises(FedaugError, match=r"only 3 of 4 SuperNodes connected within 0.1s"):
        serve(loopback(num_nodes=3), [config], fresh=False, node_timeout=0.1)


def test_a_node_records_graphs_as_its_own_device_allows_not_as_the_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The payload carries the TrainSettings the server resolved for its device (engine.cuda_graphs): here a
    # server that records, whose CPU nodes must still train eagerly (and GPU nodes of a CPU server record).
    settings = simulation.round_train_settings

    def on_a_gpu_server(*args: Any, **kwargs: Any) -> TrainSettings:
        return dataclasses.replace(settings(*args, **kwargs), cuda_graphs=True)

    monkeypatch.setattr(simulation, "round_train_settings", on_a_gpu_server)
    recording: list[bool] = []
    monkeypatch.setattr(local_training, "recorded_steps", lambda *args: recording.append(True))
    config = tiny_config(tmp_path, "fedavg")
    serve(loopback(num_nodes=4), [config], fresh=False, node_timeout=5)
    assert len(metrics(config)) == 2 and recording == []


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("flea", {}),
        ("fedmix", {}),
        ("fedbr", {}),
        ("ccvr", {"method.variant": "shared_features", **SMALLER["ccvr"]}),
    ],
)
def test_differentially_private_sharing_on_flower_equals_engine(
    tmp_path: Path, name: str, extra: dict[str, str]
) -> None:
    # Prepare: a budget that the accountant spends over the rounds (the ledger rides in the server's state,
    # the noise is drawn on the clients' nodes)
    pytest.importorskip("dp_accounting")
    dp = {"method.share_dp.epsilon": "8", "method.share_dp.delta": "1e-5", "method.share_dp.clip": "1"}
    config = tiny_config(tmp_path, name, **dp, **extra)
    flower = dataclasses.replace(config, name="smoke-flower")
    run_experiment(config)
    # Execute
    serve(loopback(num_nodes=4), [flower], fresh=False, node_timeout=5)
    # Assert: the same numbers every round, the privacy spent among them
    engine = metrics(config)
    assert metrics(flower) == engine and len(engine) == 2
    assert any(key.startswith("share_dp") for key in engine[-1]), sorted(engine[-1])
    summaries = [json.loads((run_dir_for(c) / "summary.json").read_text()) for c in (config, flower)]
    assert summaries[0]["share_dp_epsilon"] == summaries[1]["share_dp_epsilon"] > 0
