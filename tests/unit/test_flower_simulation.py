"""FedAvg and FLea in Flower's simulation runtime (Ray, one SuperNode per client) equal our engine exactly.

One simulation runs both methods (Ray starts once, ~20-30 s on a loaded 2-core machine); the engine runs
the same configs in-process. Every logged number of every round must be identical: same seeds
(fedaug.runtime.seeding), same client order, same aggregation order, same float32 arithmetic on one thread.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("ray")

from fedaug.config.identity import run_dir_for
from fedaug.config.load import load_config
from fedaug.flower.simulation import simulate
from fedaug.runs.runner import comparison_configs, run_experiment

REPO = Path(__file__).resolve().parents[2]


def _metrics(config) -> list[dict]:
    return [json.loads(line) for line in (run_dir_for(config) / "metrics.jsonl").read_text().splitlines()]


def test_fedavg_and_flea_in_flower_simulation_equal_the_engine(tmp_path: Path) -> None:
    # Prepare: 4 synthetic clients, 3 per round, 2 rounds, 1 local epoch, MLP
    overrides = [
        f"out_dir={tmp_path}",
        "partition.num_clients=4",
        "train.clients_per_round=3",
        "train.rounds=2",
        "engine.num_threads=1",
        "engine.progress=false",
        "compare=[fedavg, flea]",
    ]
    configs = comparison_configs(load_config([REPO / "configs" / "smoke.yaml"], overrides))
    on_flower = [dataclasses.replace(c, name="smoke-flower") for c in configs]
    # Execute
    engine_summaries = [run_experiment(c) for c in configs]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flower_summaries = simulate(on_flower, num_cpus=1)
    # Assert
    assert [c.method.name for c in configs] == ["fedavg", "flea"]
    for engine_config, flower_config in zip(configs, on_flower, strict=True):
        engine_rounds, flower_rounds = _metrics(engine_config), _metrics(flower_config)
        assert [r["round"] for r in flower_rounds] == [1, 2]
        assert [r["test/acc"] for r in flower_rounds] == [r["test/acc"] for r in engine_rounds]
        assert flower_rounds == engine_rounds  # losses, lr, clients, FLea's buffer metrics too
    assert flower_summaries == engine_summaries
    assert "flea/buffer_size" in _metrics(on_flower[1])[-1]
    assert not [w for w in caught if "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO" in str(w.message)]  # Ray's tip
