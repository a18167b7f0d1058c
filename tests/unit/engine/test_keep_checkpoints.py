"""``engine.keep_checkpoints``: the checkpoints of chosen rounds survive next to ``latest.pt``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from fedaug.config.load import load_config
from fedaug.engine.checkpoint import RunStore
from fedaug.engine.simulation import Simulation
from fedaug.errors import ConfigError
from tests.conftest import make_spec


def test_kept_rounds_hold_that_rounds_state(tmp_path: Path) -> None:
    spec = replace(make_spec(tmp_path / "kept", rounds=3), keep_checkpoints=(1, 3))
    Simulation(spec).run()
    Simulation(make_spec(tmp_path / "one", rounds=1)).run()
    store = RunStore(tmp_path / "kept")
    assert store.kept_rounds() == [1, 3]
    assert not store.round_ckpt_path(2).exists()
    first = store.load_checkpoint(1)
    last = store.load_checkpoint(3)
    assert first is not None and last is not None
    assert (first["round_num"], last["round_num"]) == (1, 3)
    one_round = RunStore(tmp_path / "one").load_checkpoint()
    assert one_round is not None
    for key, value in one_round["state"]["model_state"].items():
        assert torch.equal(first["state"]["model_state"][key], value)
    latest = store.load_checkpoint()
    assert latest is not None
    for key, value in latest["state"]["model_state"].items():
        assert torch.equal(last["state"]["model_state"][key], value)
    assert store.load_checkpoint(2) is None


def test_default_keeps_only_latest(tmp_path: Path) -> None:
    Simulation(make_spec(tmp_path, rounds=2)).run()
    assert RunStore(tmp_path).kept_rounds() == []
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["latest.pt"]


def test_config_accepts_rounds_and_rejects_bad_values() -> None:
    assert load_config([], ["engine.keep_checkpoints=[5, 30]"]).engine.keep_checkpoints == [5, 30]
    assert load_config([], []).engine.keep_checkpoints == []
    for bad in ("[0]", "[1.5]", "[true]"):
        with pytest.raises(ConfigError, match="keep_checkpoints"):
            load_config([], [f"engine.keep_checkpoints={bad}"])
