"""Issue #66's stateful baselines on Flower: SCAFFOLD's control variate ``c_i`` and FedDyn's gradient state
``h_i`` stay on their node across rounds and equal the engine's, tensor for tensor.

``test_flower_engine.py`` runs every registered method (the seven new ones included: fedavgm, fedadam,
fedyogi, fedadagrad, fednova, scaffold, feddyn) for 2 rounds of 3 of 4 clients and compares every logged
number and the final model with the engine. Here every client trains in each of 3 rounds, so each client's
state from round r is used in round r + 1; the nodes' states are compared with the engine checkpoint's
``client_states``, and a node that forgets its state (a negative control) must change the numbers. Two
stateful runs served one after the other on the same nodes (a ``compare`` list, as ``fedaug flower simulate``
serves it) each equal their engine run: one run's state is never the next one's start. A run resumed in a
new Flower run (fresh nodes) has lost its clients' state: it warns (a known limitation; FedAvg resumes
exactly).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr")

from fedaug import registry
from fedaug.config.identity import run_dir_for
from fedaug.flower import client_app, server_app
from fedaug.flower.loopback import LoopbackGrid, task_identity
from fedaug.flower.server_app import serve
from fedaug.runs.runner import run_experiment
from tests.unit.test_flower_engine import metrics, tiny_config

NEW_BASELINES = ["fedavgm", "fedadam", "fedyogi", "fedadagrad", "fednova", "scaffold", "feddyn"]
STATEFUL = ["scaffold", "feddyn"]
EVERY_ROUND = {"partition.num_clients": "3", "train.clients_per_round": "3", "train.rounds": "3"}


@pytest.fixture(autouse=True)
def _task_identity() -> Iterator[None]:
    """Messages read the run/node identity that Flower's runtime sets per process."""
    client_app.client_host.cache_clear()
    with task_identity():
        yield


def _node_states(grid: LoopbackGrid) -> dict[int, dict[str, torch.Tensor]]:
    """Each node's kept client state, by the client (partition id) it holds."""
    return {
        int(ctx.node_config["partition-id"]): client_app.load_client_state(ctx)
        for ctx in grid.contexts.values()
    }


def test_the_new_baselines_are_in_the_flower_vs_engine_comparison() -> None:
    """test_flower_engine.test_method_on_flower_equals_engine runs every registered method, without a skip."""
    from tests.unit.test_flower_engine import SMALLER

    assert set(NEW_BASELINES) <= set(registry.available("method"))
    assert not set(NEW_BASELINES) & set(SMALLER)  # the smoke preset as it is, no per-method shortcut


@pytest.mark.parametrize("name", STATEFUL)
def test_client_state_lives_on_its_node_across_rounds_and_equals_the_engines(
    tmp_path: Path, name: str
) -> None:
    # Prepare
    config = tiny_config(tmp_path, name, **EVERY_ROUND)
    flower = dataclasses.replace(config, name="stateful-flower")
    grid = LoopbackGrid(client_app.app, 3)
    run_experiment(config)
    # Execute
    serve(grid, [flower], fresh=False, node_timeout=5)
    # Assert: the same numbers every round, and each node's state is the engine's state of that client
    assert metrics(flower) == metrics(config) and len(metrics(flower)) == 3
    engine = torch.load(run_dir_for(config) / "ckpt" / "latest.pt", weights_only=True)["client_states"]
    nodes = _node_states(grid)
    assert sorted(nodes) == sorted(int(c) for c in engine) == [0, 1, 2]
    for client, state in nodes.items():
        expected = engine[client] if client in engine else engine[str(client)]
        assert set(state) == set(expected)
        for key, value in state.items():
            assert torch.equal(value, expected[key]), (client, key)
        assert any(value.abs().sum() > 0 for value in state.values())  # a state that was really updated
    on_server = torch.load(run_dir_for(flower) / "ckpt" / "latest.pt", weights_only=True)
    assert on_server["client_states"] == {}  # it never travels to the server


def test_a_node_that_forgets_its_state_changes_the_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The negative control: the comparison above fails if the state is not carried from round to round."""
    # Prepare
    config = tiny_config(tmp_path, "scaffold", **EVERY_ROUND)
    flower = dataclasses.replace(config, name="forgetful-flower")
    run_experiment(config)
    monkeypatch.setattr(client_app, "save_client_state", lambda context, state, run="": None)
    # Execute
    serve(LoopbackGrid(client_app.app, 3), [flower], fresh=False, node_timeout=5)
    # Assert: round 1 (no state yet) is the same, the later rounds are not
    assert metrics(flower)[0] == metrics(config)[0]
    assert metrics(flower)[1:] != metrics(config)[1:]


def test_runs_served_on_the_same_nodes_do_not_share_client_state(tmp_path: Path) -> None:
    # Prepare: SCAFFOLD's c_i and FedDyn's g_k are keyed by the same parameter names, so a node that kept
    # SCAFFOLD's state would hand it to FedDyn's round 1 (as it did before the state was tagged by run)
    configs = [tiny_config(tmp_path, name, **EVERY_ROUND) for name in ("scaffold", "feddyn", "scaffold")]
    configs[2] = dataclasses.replace(configs[2], seed=1)  # the same method again, another seed
    on_flower = [dataclasses.replace(c, name="shared-nodes") for c in configs]
    for config in configs:
        run_experiment(config)
    # Execute: one grid, its nodes' contexts kept from run to run
    serve(LoopbackGrid(client_app.app, 3), on_flower, fresh=False, node_timeout=5)
    # Assert
    for config, flower in zip(configs, on_flower, strict=True):
        assert metrics(flower) == metrics(config), config.method.name


@pytest.mark.parametrize(("name", "keeps_state"), [("scaffold", True), ("fedavg", False)])
def test_a_stateful_run_resumed_on_fresh_nodes_warns_that_its_client_state_is_gone(
    tmp_path: Path,
    name: str,
    keeps_state: bool,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Prepare: the Flower run is interrupted in round 3 (after round 2's checkpoint)
    config = tiny_config(tmp_path, name, **EVERY_ROUND)
    run_experiment(config)
    flower = dataclasses.replace(config, name="resumed-flower")
    train = server_app.FlowerEngine.run_client_updates

    def interrupted(self, payload, participants, round_num):  # type: ignore[no-untyped-def]
        if round_num == 3:
            raise KeyboardInterrupt
        return train(self, payload, participants, round_num)

    monkeypatch.setattr(server_app.FlowerEngine, "run_client_updates", interrupted)
    with pytest.raises(KeyboardInterrupt):
        serve(LoopbackGrid(client_app.app, 3), [flower], fresh=False, node_timeout=5)
    monkeypatch.setattr(server_app.FlowerEngine, "run_client_updates", train)
    # Execute: resumed by a new Flower run, whose nodes start without state
    serve(LoopbackGrid(client_app.app, 3), [flower], fresh=False, node_timeout=5)
    # Assert
    warned = "resuming" in caplog.text and "clients' state" in caplog.text
    assert warned == keeps_state
    assert metrics(flower)[:2] == metrics(config)[:2]
    assert (metrics(flower) == metrics(config)) == (not keeps_state)


@pytest.mark.slow
def test_stateful_methods_in_flowers_ray_simulation_equal_the_engine(tmp_path: Path) -> None:
    """Flower's own simulation runtime (Ray, one SuperNode per client) keeps each node's context between
    rounds as the loopback grid does: SCAFFOLD then FedDyn in one simulation, every client every round."""
    pytest.importorskip("ray")
    from fedaug.config.load import load_config
    from fedaug.flower.simulation import simulate
    from fedaug.runs.runner import comparison_configs
    from tests.unit.test_flower_engine import REPO

    overrides = [f"{k}={v}" for k, v in EVERY_ROUND.items()]
    overrides += [f"out_dir={tmp_path}", "engine.num_threads=1", "engine.progress=false"]
    overrides += ["method=scaffold", "compare=[scaffold, feddyn]"]
    configs = comparison_configs(load_config([REPO / "configs" / "smoke.yaml"], overrides))
    on_flower = [dataclasses.replace(c, name="ray-flower") for c in configs]
    for config in configs:
        run_experiment(config)
    simulate(on_flower, num_cpus=1)
    for config, flower in zip(configs, on_flower, strict=True):
        assert metrics(flower) == metrics(config), config.method.name
