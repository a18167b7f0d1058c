"""The node-local store of a client's state (:mod:`fedaug.flower.client_store`), without Flower: a state
comes back bit for bit, a node keeps only the rounds it is told to, and every file that is not this client's
state of this run and round is refused with one line naming the client, the file and what to do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from fedaug.api import ClientUpdate
from fedaug.engine.checkpoint import DIGEST_KEY, content_digest
from fedaug.errors import CheckpointError, PathError
from fedaug.flower.client_store import STORE_FORMAT, ClientStateStore, state_rounds
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.scaffold import Scaffold
from fedaug.training.client import HookedClient, keeps_client_state

RUN = "0123456789abcdef"


def _state() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {"w": torch.randn(3, 4, generator=generator), "b": torch.tensor([1e-45, -0.0, float("inf")])}


def _store(tmp_path: Path, client: int = 2, run: str = RUN) -> ClientStateStore:
    return ClientStateStore(tmp_path / str(client), run, client)


def test_a_saved_state_loads_back_bit_for_bit_and_round_zero_is_no_state(tmp_path: Path) -> None:
    # Prepare
    store, state = _store(tmp_path), _state()
    # Execute
    store.save(3, state)
    loaded = store.load(3, required=True)
    # Assert: the same bytes (a subnormal, a negative zero, an infinity); no state before the first round
    assert loaded.keys() == state.keys()
    assert all(loaded[k].view(torch.int32).equal(state[k].view(torch.int32)) for k in state)
    assert store.load(0, required=True) is None and store.load(5, required=False) is None
    assert store.rounds() == [3] and not list(store.root.glob(".*.tmp"))  # written atomically


def test_a_node_keeps_only_the_rounds_it_is_told_to(tmp_path: Path) -> None:
    # Prepare
    store = _store(tmp_path)
    for round_num in (1, 2, 4, 5):
        store.save(round_num, {"round": torch.tensor(round_num)})
    # Execute: started round 4 from round 2 (5: left by an interrupted attempt the checkpoint never recorded)
    store.keep_only({2, 4})
    # Assert
    assert store.rounds() == [2, 4]
    assert int(store.load(4, required=True)["round"]) == 4


def _rewrite(path: Path, **changes: object) -> None:
    """The file's content with ``changes``, its digest made to match again (a tag, not a flipped byte)."""
    content = torch.load(path, weights_only=True)
    content.pop(DIGEST_KEY)
    content.update(changes)
    content[DIGEST_KEY] = content_digest(content)
    torch.save(content, path)


def _flip(path: Path) -> None:
    """A changed tensor under the old digest (torch's reader does not notice)."""
    content = torch.load(path, weights_only=True)
    content["state"]["w"][0, 0] += 1
    torch.save(content, path)


TAMPERED = {
    "empty": (lambda path: path.write_bytes(b""), r"cannot be used \(the file is empty\)"),
    "truncated": (lambda path: path.write_bytes(path.read_bytes()[:200]), r"cannot be used \(RuntimeError: "),
    "flipped": (_flip, r"cannot be used \(its content does not match its SHA-256 digest\)"),
    "another run": (
        lambda path: _rewrite(path, run="fedcba9876543210"),
        r"\(it is the state of run fedcba9876543210, client 2, round 3; expected run 0123456789abcdef, "
        r"client 2, round 3\)",
    ),
    "another client": (
        lambda path: _rewrite(path, client=1),
        r"it is the state of run \w+, client 1, round 3;",
    ),
    "another round": (
        lambda path: _rewrite(path, round=2),
        r"it is the state of run \w+, client 2, round 2;",
    ),
    "not a state file": (lambda path: torch.save({"w": torch.zeros(1)}, path), r"not a fedaug client state"),
    "another format": (lambda path: _rewrite(path, format=STORE_FORMAT + 1), r"not a fedaug client state"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_file_that_is_not_this_clients_state_of_this_run_and_round_is_refused(
    tmp_path: Path, case: str
) -> None:
    # Prepare
    tamper, problem = TAMPERED[case]
    store = _store(tmp_path)
    store.save(3, _state())
    tamper(store.path(3))
    # Execute
    with pytest.raises(CheckpointError) as refused:
        store.load(3, required=True)
    # Assert: the client, the file, the problem and what to do
    message = str(refused.value)
    assert message.startswith(f"client 2's state file {store.path(3)} cannot be used ("), message
    assert re.search(problem, message), message
    assert message.endswith(
        "); restore it from a copy, or start the run over with --fresh (fedaug flower "
        "simulate/serve ... --fresh)"
    ), message


def test_a_missing_state_is_refused_only_where_the_client_must_have_one(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert store.load(2, required=False) is None  # a method that keeps no state
    with pytest.raises(
        CheckpointError, match=r"client 2 trained in round 2, but its state of that round is "
    ):
        store.load(2, required=True)


def test_a_store_that_cannot_be_written_says_to_give_the_node_a_state_dir(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    store = ClientStateStore(tmp_path / "file" / "2", RUN, 2)
    with pytest.raises(PathError, match=r"client 2 cannot keep its state in .*--state-dir DIR"):
        store.save(1, _state())


def test_the_servers_state_rounds_are_each_clients_last_training_round() -> None:
    records = [{"round": 1, "clients": [0, 2]}, {"round": 2, "clients": [1, 2]}, {"round": 3, "clients": [3]}]
    assert state_rounds(records) == {0: 1, 1: 2, 2: 2, 3: 3}
    assert state_rounds(records[:1]) == {0: 1, 2: 1}


def test_the_methods_that_keep_a_client_state() -> None:
    class Keeps(HookedClient):
        def kept_state(self, update: ClientUpdate) -> object:
            return update.model_state

    assert keeps_client_state(Scaffold.__new__(Scaffold))
    assert keeps_client_state(Keeps.__new__(Keeps))
    assert not keeps_client_state(FedAvg.__new__(FedAvg))
