"""Fixtures shared by unit tests in several folders (module-scoped: each test module builds its own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedaug.config.identity import run_dir_for
from fedaug.config.load import load_config
from fedaug.runs.runner import run_experiment
from tests.conftest import SMOKE
from tests.unit.experiments.helpers import BASE


@pytest.fixture(scope="module")
def bn_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 2-round FedAvg run of the BN CNN on 3 classes of 28x28 blobs."""
    out = tmp_path_factory.mktemp("runs")
    config = load_config([SMOKE], [*BASE, "train.rounds=2", f"out_dir={out}"])
    run_experiment(config)
    return run_dir_for(config)
