"""Branching off a FedAvg run on another device: the start checkpoint is loaded onto the run's device, and
repeating FedAvg's rounds on another device than the FedAvg run's warns (meta stands in for a GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fedaug.api import RunContext, ServerState
from fedaug.engine.checkpoint import RunStore
from fedaug.methods.ccvr.method import CCVR
from fedaug.runs.branch import _warn_other_machine, branch_from_fedavg, start_checkpoint
from fedaug.runtime.device import tensor_devices
from fedaug.types import StateDict

META = torch.device("meta")


def _fedavg_run(run_dir: Path, round_num: int = 2) -> None:
    """A FedAvg run dir with a CPU checkpoint after ``round_num`` (what a CPU FedAvg run leaves)."""
    store = RunStore(run_dir)
    store.prepare()
    state = {"classifier.weight": torch.ones(3, 4), "classifier.bias": torch.zeros(3)}
    ckpt_state = vars(ServerState(round_num=round_num, model_state=state))
    store.save_checkpoint({"state": ckpt_state, "client_states": {}, "round_num": round_num})
    lines = "".join(json.dumps({"round": r}) + "\n" for r in range(1, round_num + 1))
    store.metrics_path.write_text(lines)
    store.timings_path.write_text(lines)


def test_the_start_checkpoint_is_loaded_onto_the_given_device(tmp_path: Path) -> None:
    _fedavg_run(tmp_path)
    ckpt = start_checkpoint(RunStore(tmp_path), 2, map_location=META)
    assert ckpt is not None and tensor_devices(ckpt["state"]) == {META}
    assert tensor_devices(start_checkpoint(RunStore(tmp_path), 2)) == {torch.device("cpu")}  # default


def test_the_method_converts_fedavgs_state_on_the_runs_device(tmp_path: Path) -> None:
    # Prepare: a CPU FedAvg checkpoint, and CCVR (FedAvg before its last round) that records what it converts
    _fedavg_run(tmp_path / "fedavg")
    seen: list[set[torch.device]] = []

    class Spy(CCVR):
        def init_server(self, model_state: StateDict, run: RunContext) -> ServerState:
            seen.append(tensor_devices(model_state))
            return super().init_server(model_state, run)

    run = RunContext(num_clients=2, num_classes=3, input_shape=(4,), seed=0, num_rounds=3, device=META)
    # Execute
    start = branch_from_fedavg(tmp_path / "fedavg", tmp_path / "ccvr", Spy(), run, max_round=3)
    # Assert: it branched after round 2, converting a state on the run's device (CCVR's extras too)
    assert start == 2 and seen == [{META}]


def test_repeating_fedavgs_rounds_on_another_device_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "env.json").write_text(json.dumps({"device": "cuda:0", "gpu_name": "NVIDIA H200"}))
    with caplog.at_level("WARNING", logger="fedaug.runs.branch"):
        _warn_other_machine(tmp_path, 79, torch.device("cpu"))
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1
    assert f"{tmp_path} ran on NVIDIA H200 and this run repeats its rounds 1-79 on cpu" in warned[0]
    assert "another device" in warned[0]
    caplog.clear()
    (tmp_path / "env.json").write_text(json.dumps({"device": "cpu"}))  # no CPU model recorded: not checked
    with caplog.at_level("WARNING", logger="fedaug.runs.branch"):
        _warn_other_machine(tmp_path, 79, torch.device("cpu"))
    assert not caplog.records
