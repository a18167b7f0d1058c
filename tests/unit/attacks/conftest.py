"""Finished runs the attack tests read (module-scoped: each test module runs them once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedaug.cli.main import main
from tests.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """FLea (2 rounds, round 1 kept), FedMix and FedData (1 round) on 12x12 synthetic images with LeNet-5."""
    out = tmp_path_factory.mktemp("runs")
    common = [
        "--out-dir", str(out),
        "--set", "model=lenet5", "--set", "data.shape=[1,12,12]", "--set", "data.num_train=120",
        "--set", "data.num_test=120", "--set", "engine.progress=false", "--set", "engine.num_threads=1",
    ]  # fmt: skip
    # the lengths in presets, not --set train.rounds=..., which would give each run dir a name of its own
    presets = {rounds: out / f"smoke_r{rounds}.yaml" for rounds in (1, 2)}
    for rounds, preset in presets.items():
        preset.write_text(f"extends: {REPO_ROOT / 'configs' / 'smoke.yaml'}\ntrain: {{rounds: {rounds}}}\n")
    flea = ["run", str(presets[2]), *common, "--method", "flea", "--set", "engine.keep_checkpoints=[1]"]
    assert main(flea) == 0
    for method in ("fedmix", "feddata"):
        assert main(["run", str(presets[1]), *common, "--method", method]) == 0
    root = out / "smoke" / "synthetic-dirichlet0.5_2-K6"
    return {m: root / m / "seed0" for m in ("flea", "fedmix", "feddata")}
