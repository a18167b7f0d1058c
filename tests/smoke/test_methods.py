"""Every registered method runs 2 rounds on 3 synthetic clients (new methods get this test for free)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fedaug import registry
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.simulation import Simulation
from tests.conftest import make_spec


@pytest.mark.parametrize("name", registry.available("method"))
def test_method_runs_two_rounds(tmp_path: Path, name: str) -> None:
    method = registry.get("method", name)()
    summary = Simulation(make_spec(tmp_path, method=method, rounds=2, per_round=3)).run()
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["round"] for r in records] == [1, 2]
    assert all(math.isfinite(r["train/loss"]) for r in records)
    assert 0.0 <= summary["best_acc"] <= 1.0
    assert (tmp_path / "ckpt" / "latest.pt").exists()
