"""The round loop: run files, determinism, resume after an interruption at any point, client errors."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from fedaug.api import ClientContext, ClientUpdate, Payload, ServerState, TrainSettings
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.simulation import Simulation, round_train_settings
from fedaug.errors import ClientError
from fedaug.methods.fedavg import FedAvg
from tests.conftest import make_spec
from tests.helpers import killed_in_round, run_files


def test_run_writes_metrics_summary_and_checkpoint(tmp_path: Path) -> None:
    summary = Simulation(make_spec(tmp_path, rounds=3, per_round=2)).run()
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["round"] for r in records] == [1, 2, 3]
    assert all(len(r["clients"]) == 2 for r in records)
    assert summary["rounds"] == 3
    assert summary["best_acc"] == max(r["test/acc"] for r in records)
    assert summary["final_acc"] == records[-1]["test/acc"]
    assert summary["last10_acc"] == pytest.approx(sum(r["test/acc"] for r in records) / 3)
    assert (tmp_path / "ckpt" / "latest.pt").exists()
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert [r["round"] for r in read_jsonl(tmp_path / "timings.jsonl")] == [1, 2, 3]
    lrs = [r["lr"] for r in records]
    assert lrs == pytest.approx([1e-3, 1e-3 * 0.98, 1e-3 * 0.98**2])


def test_same_seed_gives_identical_metrics_and_other_seed_differs(tmp_path: Path) -> None:
    Simulation(make_spec(tmp_path / "a", rounds=3, per_round=2)).run()
    Simulation(make_spec(tmp_path / "b", rounds=3, per_round=2)).run()
    Simulation(make_spec(tmp_path / "c", rounds=3, per_round=2, seed=1)).run()
    assert run_files(tmp_path / "a") == run_files(tmp_path / "b")
    assert run_files(tmp_path / "a")[0] != run_files(tmp_path / "c")[0]


@pytest.mark.parametrize(("kill_round", "calls"), [(1, 0), (3, 1), (4, 2)])
def test_resume_after_interruption_matches_uninterrupted_run(
    tmp_path: Path, kill_round: int, calls: int
) -> None:
    Simulation(make_spec(tmp_path / "full", rounds=4)).run()
    killed = killed_in_round(FedAvg, kill_round=kill_round, calls_before_kill=calls)
    with pytest.raises(KeyboardInterrupt):
        Simulation(make_spec(tmp_path / "cut", rounds=4, method=killed)).run()
    assert not (tmp_path / "cut" / "summary.json").exists()
    Simulation(make_spec(tmp_path / "cut", rounds=4)).run()
    assert run_files(tmp_path / "cut") == run_files(tmp_path / "full")


def test_resume_when_killed_between_metrics_line_and_checkpoint(tmp_path: Path) -> None:
    Simulation(make_spec(tmp_path / "full", rounds=3)).run()
    Simulation(make_spec(tmp_path / "cut", rounds=2)).run()
    # A kill after round 3's metrics line but before its checkpoint leaves a line ahead of the checkpoint
    # (and maybe a torn partial line); the resumed run must rewind and repeat round 3 identically.
    full_lines = (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()
    with open(tmp_path / "cut" / "metrics.jsonl", "a") as handle:
        handle.write(full_lines[2] + "\n" + full_lines[2][:10])
    (tmp_path / "cut" / "summary.json").unlink()
    Simulation(make_spec(tmp_path / "cut", rounds=3)).run()
    assert run_files(tmp_path / "cut") == run_files(tmp_path / "full")


class _Broken(FedAvg):
    def client_update(self, payload: Payload, ctx: ClientContext) -> ClientUpdate:
        raise RuntimeError("boom")


def test_client_failure_names_round_client_and_method(tmp_path: Path) -> None:
    with pytest.raises(ClientError, match=r"round 1, client 0, method 'fedavg': RuntimeError: boom"):
        Simulation(make_spec(tmp_path, method=_Broken())).run()


def test_the_specs_precision_reaches_every_rounds_train_settings(tmp_path: Path) -> None:
    # Prepare: a schedule that says nothing of precision, and a method that records what it is given
    seen: list[str] = []

    class Spy(FedAvg):
        def payload(self, state: ServerState, round_num: int, train: TrainSettings) -> Payload:
            seen.append(train.precision)
            return super().payload(state, round_num, train)

    spec = replace(make_spec(tmp_path, method=Spy(), rounds=1, per_round=1), precision="bf16")
    # Execute
    Simulation(spec).run()
    # Assert: the spec's precision, and the same rule for callers outside the loop
    assert seen == ["bf16"] and spec.train_settings(1).precision == "float32"
    assert round_train_settings(spec.train_settings, "bf16", 1) == replace(
        spec.train_settings(1), precision="bf16"
    )
