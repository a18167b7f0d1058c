"""The per-client evaluation cache (engine/eval_cache.py): a result is reused only while the client's weights
are the same unchanged tensors; a run of ``local`` with it logs what the uncached engine logs, byte for byte,
also when a model changes in place and across a resume."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug.api import ClientUpdate, RunContext, ServerState
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.eval_cache import ClientEvalCache
from fedaug.engine.simulation import Simulation, SimulationSpec
from fedaug.methods.local import MODELS_KEY, Local
from fedaug.training.loop import load_weights, snapshot_state
from fedaug.types import StateDict
from tests.conftest import make_spec
from tests.helpers import killed_in_round, run_files


def _content(weights: StateDict) -> tuple[tuple[str, list[float]], ...]:
    return tuple((key, tensor.flatten().tolist()) for key, tensor in weights.items())


def _counting_cache() -> tuple[ClientEvalCache[Any], Callable[[int, StateDict], Any]]:
    """A cache and a lookup whose result is the weights' content (so a stale result shows)."""
    cache: ClientEvalCache[Any] = ClientEvalCache()
    return cache, lambda client, weights: cache.get(client, weights, lambda: _content(weights))


def test_unchanged_weights_are_not_computed_again() -> None:
    cache, lookup = _counting_cache()
    weights = {"w": torch.ones(3), "b": torch.zeros(1)}
    lookup(0, weights)
    assert lookup(0, dict(weights)) == _content(weights)  # another dict of the very same tensors
    assert cache.computed == 1
    lookup(1, weights)  # every client has its own entry
    assert cache.computed == 2


@pytest.mark.parametrize(
    "change",
    [
        lambda w: w["w"].add_(1.0),  # an optimizer-style in-place step
        lambda w: w["w"][1:].zero_(),  # through a view
        lambda w: torch._foreach_copy_([w["w"]], [torch.full((3,), 5.0)]),  # load_weights' copy
        lambda w: w.__setitem__("w", torch.full((3,), 7.0)),  # a new tensor in the same dict
        lambda w: w.__setitem__("extra", torch.zeros(1)),  # a key more
        lambda w: w.pop("b"),  # a key less
    ],
    ids=["add_", "view", "foreach_copy_", "new_tensor", "key_added", "key_removed"],
)
def test_weights_changed_in_place_are_computed_again(change: Callable[[StateDict], Any]) -> None:
    cache, lookup = _counting_cache()
    weights = {"w": torch.ones(3), "b": torch.zeros(1)}
    lookup(0, weights)
    with torch.no_grad():
        change(weights)
    assert lookup(0, weights) == _content(weights)
    assert cache.computed == 2


def test_a_write_to_the_snapshot_buffer_is_seen_through_its_views() -> None:
    # snapshot_state's entries are views of one flat buffer: a write to the buffer moves every view's counter
    model = torch.nn.Linear(3, 2)
    weights = snapshot_state(model)
    cache, lookup = _counting_cache()
    lookup(0, weights)
    base = weights["weight"]._base
    assert base is not None and base is weights["bias"]._base
    with torch.no_grad():
        base.mul_(2.0)
    assert lookup(0, weights) == _content(weights)
    assert cache.computed == 2


def test_loading_weights_elsewhere_does_not_count_as_a_change() -> None:
    cache, lookup = _counting_cache()
    model = torch.nn.Linear(3, 2)
    weights = snapshot_state(model)
    lookup(0, weights)
    load_weights(torch.nn.Linear(3, 2), weights)  # reads them only
    lookup(0, weights)
    assert cache.computed == 1


def test_inference_tensors_are_never_cached() -> None:
    cache, lookup = _counting_cache()
    with torch.inference_mode():
        weights = {"w": torch.ones(3)}
    lookup(0, weights)
    lookup(0, weights)
    assert cache.computed == 2


def test_discard_changed_drops_only_the_changed_clients() -> None:
    cache, lookup = _counting_cache()
    models = [{"w": torch.zeros(2)}, {"w": torch.zeros(2)}, {"w": torch.zeros(2)}]
    for client, weights in enumerate(models):
        lookup(client, weights)
    models[0]["w"].add_(1.0)  # in place
    models[1] = {"w": torch.ones(2)}  # replaced
    cache.discard_changed(models)
    assert sorted(cache._entries) == [2]
    assert lookup(0, models[0]) == _content(models[0]) and cache.computed == 4


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from(["look", "inplace", "replace", "view"])),
        min_size=1,
        max_size=25,
    )
)
def test_a_cached_result_is_always_the_current_weights_result(steps: list[tuple[int, str]]) -> None:
    # Property: whatever happens to the clients' weights between lookups, a lookup returns what computing
    # it now would return
    models = {client: {"w": torch.zeros(2), "b": torch.zeros(1)} for client in range(3)}
    _, lookup = _counting_cache()
    for number, (client, action) in enumerate(steps, start=1):
        weights = models[client]
        if action == "inplace":
            weights["w"].add_(float(number))
        elif action == "replace":
            models[client] = {"w": torch.full((2,), float(number)), "b": weights["b"]}
        elif action == "view":
            weights["b"][:1].fill_(float(number))
        assert lookup(client, models[client]) == _content(models[client])


class _Uncached(ClientEvalCache[Any]):
    """The engine before the cache: every lookup computes."""

    def get(self, client: int, weights: StateDict, compute: Callable[[], Any]) -> Any:
        self.computed += 1
        return compute()


class _ZeroesAKeptModel(Local):
    """``local`` whose server zeroes, in place, in round 4, the kept model of the first client that trained
    before and is not in the round: a model that changes without being replaced."""

    zero_round = 4
    zeroed: int | None = None

    def server_update(
        self, state: ServerState, updates: Sequence[ClientUpdate], run: RunContext
    ) -> ServerState:
        new = super().server_update(state, updates, run)
        idle = [c for c in sorted(new.extra[MODELS_KEY]) if c not in {u.client_id for u in updates}]
        if new.round_num == self.zero_round and idle:
            self.zeroed = idle[0]
            with torch.no_grad():
                for tensor in new.extra[MODELS_KEY][idle[0]].values():
                    tensor.zero_()
        return new


def _spec(run_dir: Path, method: Local, rounds: int = 5) -> SimulationSpec:
    spec = make_spec(run_dir, method=method, num_clients=5, per_round=2, rounds=rounds)
    return replace(spec, local_test_indices=[idx[:6] for idx in spec.client_indices])


def _run(spec: SimulationSpec, *, cached: bool) -> Simulation:
    sim = Simulation(spec)
    if not cached:
        sim._test_cache, sim._local_cache = _Uncached(), _Uncached()
    sim.run()
    return sim


@pytest.mark.parametrize("method_cls", [Local, _ZeroesAKeptModel])
def test_cached_evaluation_logs_what_the_uncached_one_does(tmp_path: Path, method_cls: type[Local]) -> None:
    # Execute: the same run with the cache and with every client's model evaluated every round
    cached = _run(_spec(tmp_path / "cached", method_cls()), cached=True)
    uncached = _run(_spec(tmp_path / "uncached", method_cls()), cached=False)
    # Assert: the same bytes, and the cache skipped evaluations (5 clients, 2 a round, 5 rounds)
    assert run_files(tmp_path / "cached") == run_files(tmp_path / "uncached")
    assert uncached._test_cache.computed == uncached._local_cache.computed == 25
    assert cached._test_cache.computed < 25 and cached._local_cache.computed < 25
    records = read_jsonl(tmp_path / "cached" / "metrics.jsonl")
    assert all(len(r["test/client_acc"]) == len(r["local/acc"]) == 5 for r in records)


def test_local_tests_every_other_round_log_what_the_uncached_engine_does(tmp_path: Path) -> None:
    # engine.local_eval_every = 2: the local tests run in rounds 2, 4 and 5, the global test every round
    spec = replace(_spec(tmp_path / "cached", _ZeroesAKeptModel()), local_eval_every=2)
    _run(spec, cached=True)
    _run(replace(spec, method=_ZeroesAKeptModel(), run_dir=tmp_path / "uncached"), cached=False)
    assert run_files(tmp_path / "cached") == run_files(tmp_path / "uncached")
    records = read_jsonl(tmp_path / "cached" / "metrics.jsonl")
    assert [r["round"] for r in records if "local/acc" in r] == [2, 4, 5]


def test_a_model_zeroed_in_place_is_evaluated_again(tmp_path: Path) -> None:
    # Execute: in round 4 the server zeroes an idle client's kept model in place
    method = _ZeroesAKeptModel()
    _run(_spec(tmp_path, method, rounds=4), cached=True)
    # Assert: a zeroed MLP predicts class 0 for every sample, so its accuracy is class 0's share of the test
    # set; round 3 logged the client's trained model, round 4 the zeroed one
    client = method.zeroed
    assert client is not None
    zero_acc = float((_spec(tmp_path, Local()).test_y == 0).double().mean())
    round_3, round_4 = read_jsonl(tmp_path / "metrics.jsonl")[2:4]
    assert round_3["test/client_acc"][client] != zero_acc
    assert round_4["test/client_acc"][client] == zero_acc


def test_a_resumed_run_is_byte_identical(tmp_path: Path) -> None:
    # Prepare / Execute: a full run; a run killed in round 3 and resumed (its cache starts empty)
    _run(_spec(tmp_path / "full", Local()), cached=True)
    killed = killed_in_round(Local, kill_round=3, calls_before_kill=1)
    with pytest.raises(KeyboardInterrupt):
        _run(_spec(tmp_path / "cut", killed), cached=True)
    resumed = _run(_spec(tmp_path / "cut", Local()), cached=True)
    # Assert: the same files; the resumed process evaluated every client once again in round 3
    assert run_files(tmp_path / "cut") == run_files(tmp_path / "full")
    assert resumed._test_cache.computed >= 5
