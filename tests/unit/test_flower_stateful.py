"""Issue #66's stateful baselines on Flower: SCAFFOLD's control variate ``c_i`` and FedDyn's gradient state
``h_i`` stay on their node across rounds and equal the engine's, tensor for tensor.

``test_flower_engine.py`` runs every registered method (the seven new ones included: fedavgm, fedadam,
fedyogi, fedadagrad, fednova, scaffold, feddyn) for 2 rounds of 3 of 4 clients and compares every logged
number and the final model with the engine. Here every client trains in each of 3 rounds, so each client's
state from round r is used in round r + 1; the nodes' states are compared with the engine checkpoint's
``client_states``, and a node that forgets its state (a negative control) must change the numbers. Two
stateful runs served one after the other on the same nodes (a ``compare`` list, as ``fedaug flower simulate``
serves it) each equal their engine run: one run's state is never the next one's start.

Resume: a Flower run killed in round 3, after its nodes trained that round and saved their new state but
before the server's checkpoint, and resumed by a new Flower run (new nodes, the same state store on disk)
writes a ``metrics.jsonl`` byte for byte that of the uninterrupted Flower run and of the engine; a resume that
ignores the stored state (the negative control) does not. A state file that is damaged, missing or of
another run is refused with one line naming the client, the file and what to do.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr")

from fedaug import registry
from fedaug.config.identity import run_dir_for
from fedaug.config.schema import ExperimentConfig
from fedaug.errors import ClientError, FedaugError
from fedaug.flower import client_app, server_app
from fedaug.flower.client_store import STATE_DIR, ClientStateStore, state_rounds, store_root
from fedaug.flower.loopback import LoopbackGrid, task_identity
from fedaug.flower.server_app import serve
from fedaug.runs.runner import run_experiment
from tests.unit.test_flower_engine import metrics, node_states, tiny_config

NEW_BASELINES = ["fedavgm", "fedadam", "fedyogi", "fedadagrad", "fednova", "scaffold", "feddyn"]
STATEFUL = ["scaffold", "feddyn"]
EVERY_ROUND = {"partition.num_clients": "3", "train.clients_per_round": "3", "train.rounds": "3"}
SOME_ROUNDS = {"partition.num_clients": "4", "train.clients_per_round": "2", "train.rounds": "4"}
"""2 of 4 clients a round: a client's last round is often not the round before (its state is older)."""


@pytest.fixture(autouse=True)
def _task_identity() -> Iterator[None]:
    """Messages read the run/node identity that Flower's runtime sets per process."""
    client_app.client_host.cache_clear()
    with task_identity():
        yield


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
    nodes = node_states(flower)
    assert sorted(nodes) == sorted(int(c) for c in engine) == [0, 1, 2]
    for client, state in nodes.items():
        expected = engine[client] if client in engine else engine[str(client)]
        assert set(state) == set(expected)
        for key, value in state.items():
            assert torch.equal(value, expected[key]), (client, key)
        assert any(value.abs().sum() > 0 for value in state.values())  # a state that was really updated
    on_server = torch.load(run_dir_for(flower) / "ckpt" / "latest.pt", weights_only=True)
    assert on_server["client_states"] == {}  # it never travels to the server
    for client in nodes:  # each node keeps the round it started from and the round it wrote
        assert ClientStateStore(store_root(flower) / str(client), "", client).rounds() == [2, 3]


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


def _interrupted_in_round_3(
    flower: ExperimentConfig, monkeypatch: pytest.MonkeyPatch, *, trained: bool, state_dir: Path | None = None
) -> None:
    """Serves ``flower`` on new nodes until round 3 is interrupted: after its clients trained (and saved
    their state), before the server's checkpoint of it (``trained``), or before they trained."""
    train = server_app.FlowerEngine.run_client_updates

    def interrupted(self, payload, participants, round_num):  # type: ignore[no-untyped-def]
        if round_num == 3 and not trained:
            raise KeyboardInterrupt
        updates = train(self, payload, participants, round_num)
        if round_num == 3:
            raise KeyboardInterrupt
        return updates

    with monkeypatch.context() as patch:
        patch.setattr(server_app.FlowerEngine, "run_client_updates", interrupted)
        with pytest.raises(KeyboardInterrupt):
            serve(_nodes(4, state_dir), [flower], fresh=False, node_timeout=5)


def _nodes(num_nodes: int, state_dir: Path | None) -> LoopbackGrid:
    """New nodes (a new Flower run), each given ``state_dir`` as its node config's ``state-dir``."""
    grid = LoopbackGrid(client_app.app, num_nodes)
    for ctx in grid.contexts.values():
        if state_dir is not None:
            ctx.node_config["state-dir"] = str(state_dir)
    return grid


@pytest.mark.parametrize(("name", "own_state_dir"), [("scaffold", False), ("feddyn", True), ("local", False)])
def test_a_stateful_run_resumed_by_a_new_flower_run_equals_the_uninterrupted_one(
    tmp_path: Path, name: str, own_state_dir: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: the engine's run, an uninterrupted Flower run and one killed in round 3 after its clients
    # trained and saved that round's state (their newer files must not be read on resume)
    config = tiny_config(tmp_path, name, **SOME_ROUNDS)
    whole = dataclasses.replace(config, name="whole-flower")
    resumed = dataclasses.replace(config, name="resumed-flower")
    state_dir = tmp_path / "node-state" if own_state_dir else None
    run_experiment(config)
    serve(_nodes(4, None), [whole], fresh=False, node_timeout=5)
    _interrupted_in_round_3(resumed, monkeypatch, trained=True, state_dir=state_dir)
    store = store_root(resumed, None if state_dir is None else str(state_dir))
    saved_in_3 = [c for c in metrics(whole)[2]["clients"] if (store / str(c) / "round_0003.pt").exists()]
    assert len(saved_in_3) == 2 and len(metrics(resumed)) == 2
    # Execute: resumed by a new Flower run (new nodes, their state store on disk)
    serve(_nodes(4, state_dir), [resumed], fresh=False, node_timeout=5)
    # Assert: byte for byte the uninterrupted run's log, equal to the engine's; the same final model
    log = (run_dir_for(resumed) / "metrics.jsonl").read_bytes()
    assert log == (run_dir_for(whole) / "metrics.jsonl").read_bytes()
    assert metrics(resumed) == metrics(config) and len(metrics(resumed)) == 4
    later = [c for r in metrics(config)[2:] for c in r["clients"]]
    assert any(c in r["clients"] for r in metrics(config)[:2] for c in later)  # a state was carried over
    final = [torch.load(run_dir_for(c) / "ckpt" / "latest.pt", weights_only=True) for c in (whole, resumed)]
    for key, value in final[0]["state"]["model_state"].items():
        assert torch.equal(value, final[1]["state"]["model_state"][key]), key
    run_dir = run_dir_for(resumed)  # the node's own folder, or the run dir's client_state/
    assert store == (run_dir / STATE_DIR if state_dir is None else state_dir / run_dir.relative_to(tmp_path))
    assert (run_dir / STATE_DIR).exists() == (state_dir is None)


@pytest.mark.parametrize("lost", ["forgetful-node", "resume-without-state"])
def test_a_flower_run_whose_clients_lose_their_state_changes_the_numbers(
    tmp_path: Path, lost: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The negative controls: the comparisons above fail if the state is not carried from round to round
    (a node that never reads it back), or past a resume (a server that names no kept state)."""
    # Prepare
    config = tiny_config(tmp_path, "scaffold", **SOME_ROUNDS)
    flower = dataclasses.replace(config, name=lost)
    run_experiment(config)
    if lost == "forgetful-node":
        monkeypatch.setattr(ClientStateStore, "load", lambda self, round_num, **kwargs: None)
    else:
        _interrupted_in_round_3(flower, monkeypatch, trained=True)
        monkeypatch.setattr(server_app, "state_rounds", lambda records: {})
    # Execute
    serve(_nodes(4, None), [flower], fresh=False, node_timeout=5)
    # Assert: the same numbers until a client that has trained before trains (after the resume), then not
    records = metrics(config)
    kept_from = next(i for i, r in enumerate(records) if set(r["clients"]) & state_rounds(records[:i]).keys())
    first = kept_from if lost == "forgetful-node" else max(kept_from, 2)  # the resume: round 3 on
    assert metrics(flower)[:first] == records[:first]
    assert metrics(flower)[first:] != records[first:]


def _damage(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def _foreign(path: Path) -> None:
    """The same client's state file of another run (its tag differs)."""
    store = ClientStateStore(path.parent, "0123456789abcdef", int(path.parent.name))
    store.save(2, torch.load(path, weights_only=True)["state"])


FRESH = r"restore it from a copy, or start the run over with --fresh"
REFUSALS = {
    "damaged": (_damage, r"cannot be used \(RuntimeError: .*\); " + FRESH),
    "foreign": (_foreign, r"cannot be used \(it is the state of run 0123456789abcdef, client 1, round 2; "),
    "missing": (Path.unlink, r"trained in round 2, but its state of that round is missing \(.* does not"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_damaged_foreign_or_missing_state_file_is_refused_with_the_client_and_what_to_do(
    tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: interrupted before round 3 (every client trained in round 2), one client's file tampered with
    tamper, problem = REFUSALS[case]
    config = tiny_config(tmp_path, "scaffold", **EVERY_ROUND)
    _interrupted_in_round_3(config, monkeypatch, trained=False)
    path = store_root(config) / "1" / "round_0002.pt"
    tamper(path)
    # Execute
    with pytest.raises(ClientError) as refused:
        serve(_nodes(3, None), [config], fresh=False, node_timeout=5)
    # Assert: the resume stops in round 3 at that client, naming its file and what to do
    message = str(refused.value)
    assert re.match(r"round 3, client 1, method 'scaffold': CheckpointError: client 1", message), message
    assert re.search(problem, message) and str(path) in message, message
    assert "--fresh" in message


@pytest.mark.slow
def test_stateful_methods_in_flowers_ray_simulation_equal_the_engine_and_resume_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flower's own simulation runtime (Ray, one SuperNode per client, a relative ``out_dir``): SCAFFOLD then
    FedDyn in one simulation equal the engine; then both are put back to their checkpoint of round 3 (as a
    kill after round 4's training, before its checkpoint, leaves them) and resumed by a second simulation,
    which rewrites the same ``metrics.jsonl`` byte for byte."""
    pytest.importorskip("ray")
    from fedaug.config.load import load_config
    from fedaug.flower.simulation import simulate
    from fedaug.runs.runner import comparison_configs
    from tests.unit.test_flower_engine import REPO

    monkeypatch.chdir(tmp_path)
    overrides = [f"{k}={v}" for k, v in SOME_ROUNDS.items()]
    overrides += [
        "out_dir=runs",
        "engine.num_threads=1",
        "engine.progress=false",
        "engine.keep_checkpoints=[3]",
    ]
    overrides += ["method=scaffold", "compare=[scaffold, feddyn]"]
    configs = comparison_configs(load_config([REPO / "configs" / "smoke.yaml"], overrides))
    on_flower = [dataclasses.replace(c, name="ray-flower") for c in configs]
    for config in configs:
        run_experiment(config)
    simulate(on_flower, num_cpus=1)
    logs = [(run_dir_for(c) / "metrics.jsonl").read_bytes() for c in on_flower]
    for config, flower in zip(configs, on_flower, strict=True):
        assert metrics(flower) == metrics(config), config.method.name
        assert (run_dir_for(flower) / STATE_DIR).is_dir()  # in the run dir, not in the actors' cwd
    for flower in on_flower:  # killed after round 4's training, before its checkpoint
        run_dir = run_dir_for(flower)
        (run_dir / "ckpt" / "round_0003.pt").replace(run_dir / "ckpt" / "latest.pt")
        (run_dir / "summary.json").unlink()
        timings = (run_dir / "timings.jsonl").read_text().splitlines(keepends=True)
        (run_dir / "timings.jsonl").write_text("".join(timings[:3]))  # written after the checkpoint
    simulate(on_flower, num_cpus=1)
    assert [(run_dir_for(c) / "metrics.jsonl").read_bytes() for c in on_flower] == logs


@pytest.mark.parametrize(("name", "refused"), [("scaffold", True), ("fedavg", False)])
def test_an_in_process_resume_of_a_flower_run_whose_nodes_keep_state_is_refused(
    tmp_path: Path, name: str, refused: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: a Flower run interrupted in round 3 (its checkpoint: round 2; the state on the nodes)
    flower = dataclasses.replace(tiny_config(tmp_path, name, **SOME_ROUNDS), name="in-process")
    _interrupted_in_round_3(flower, monkeypatch, trained=False)
    checkpoint = run_dir_for(flower) / "ckpt" / "latest.pt"
    assert torch.load(checkpoint, weights_only=True)["client_state_on_nodes"] is True
    # Execute / Assert: the engine would start SCAFFOLD's clients afresh, so it refuses and leaves the run
    # dir as it was; FedAvg's clients keep nothing and its run finishes as the engine's own
    if refused:
        before = checkpoint.read_bytes()
        with pytest.raises(FedaugError, match="was run on Flower: its scaffold clients' state is kept by"):
            run_experiment(flower)
        assert checkpoint.read_bytes() == before
    else:
        run_experiment(flower)
        engine = tiny_config(tmp_path, name, **SOME_ROUNDS)
        run_experiment(engine)
        assert metrics(flower) == metrics(engine) and len(metrics(flower)) == 4
