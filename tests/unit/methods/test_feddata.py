"""FedData: nothing shared is FedAvg, the pool's content and cost, training on local + pool, validation."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from fedaug.api import Payload, TrainSettings
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.simulation import Simulation
from fedaug.errors import ConfigError
from fedaug.methods.feddata import FedData, FedDataConfig
from tests.conftest import make_spec
from tests.unit.methods.helpers import (
    assert_equals_fedavg,
    client_context,
    initial_state,
    method_from_yaml,
    mlp_fn,
    skewed_client,
)


def test_share_fraction_zero_is_fedavg_exactly(tmp_path: Path) -> None:
    assert_equals_fedavg(tmp_path, FedData(FedDataConfig(share_fraction=0.0)), rounds=2, per_round=2)


def test_every_client_shares_its_own_samples_once_before_training(tmp_path: Path) -> None:
    # Prepare: 3 clients of 20 samples; floor(0.1 * 20) = 2 raw samples each.
    sim = Simulation(make_spec(tmp_path, method=FedData(), rounds=2, per_round=1))
    # Execute
    sim.run()
    # Assert: the pool holds 6 real samples, each a row of one client's data with its own label.
    ckpt = sim.store.load_checkpoint()
    assert ckpt is not None
    pool_x, pool_y = ckpt["state"]["extra"]["pool_x"], ckpt["state"]["extra"]["pool_y"]
    assert pool_x.shape == (6, 8) and pool_y.dtype == torch.long
    spec = sim.spec
    for client in range(3):
        x, y = spec.train_x[spec.client_indices[client]], spec.train_y[spec.client_indices[client]]
        rows = pool_x[2 * client : 2 * client + 2]
        matches = [int(torch.nonzero((x == row).all(dim=1)).flatten()[0]) for row in rows]
        assert len(set(matches)) == 2  # two distinct samples, no duplicates
        assert pool_y[2 * client : 2 * client + 2].tolist() == y[matches].tolist()
    records = read_jsonl(tmp_path / "metrics.jsonl")
    # 1 client per round, yet everyone shared with everyone before round 1: exposure 100%.
    assert all(r["feddata/exposure"] == 1.0 and r["feddata/pool_size"] == 6.0 for r in records)
    assert records[0]["feddata/bytes_up_per_client"] == 2 * 8 * 4 + 2 * 8  # float32 inputs, int64 labels
    assert records[0]["feddata/bytes_down_per_client"] == 6 * 8 * 4 + 6 * 8


def test_client_trains_on_local_plus_pool_but_reports_its_local_size() -> None:
    # Prepare: 20 local samples and a pool of 6; batch 8 gives 3 steps on local data, 4 on local + pool.
    x, y = skewed_client(num=20)
    pool_x, pool_y = skewed_client(num=6, classes=(2,))
    state = initial_state(mlp_fn())
    train = TrainSettings(local_epochs=1, batch_size=8)
    empty = {"pool_x": torch.empty(0, 8), "pool_y": torch.empty(0, dtype=torch.long)}
    # Execute
    alone = FedData().client_update(Payload(1, state, train, empty), client_context(x, y))
    pooled = FedData().client_update(
        Payload(1, state, train, {"pool_x": pool_x, "pool_y": pool_y}), client_context(x, y)
    )
    # Assert: the official code's aggregation weights (original n_k).
    assert alone.metrics["train/steps"] == 3.0 and pooled.metrics["train/steps"] == 4.0
    assert alone.num_examples == pooled.num_examples == 20


def test_clients_with_too_little_data_share_nothing(tmp_path: Path) -> None:
    # 3 clients of 9 samples share floor(0.1 * 9) = 0 samples each: nothing reaches anybody.
    Simulation(make_spec(tmp_path, method=FedData(), rounds=1, samples_per_client=9)).run()
    record = read_jsonl(tmp_path / "metrics.jsonl")[0]
    assert record["feddata/pool_size"] == 0.0 and record["feddata/exposure"] == 0.0


def test_zero_fraction_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="fedaug.methods.feddata"):
        FedData()
        assert not caplog.records
        FedData(FedDataConfig(share_fraction=0.0))
    assert "share_fraction=0" in caplog.records[0].getMessage()


@pytest.mark.parametrize("bad", [-0.1, 1.5])
def test_config_rejects_bad_fraction(bad: float) -> None:
    message = rf"method\.share_fraction must be a finite number in \[0, 1\], got {bad}"
    with pytest.raises(ConfigError, match=message):
        FedDataConfig(share_fraction=bad)


def test_yaml_preset_has_the_paper_defaults() -> None:
    method = method_from_yaml("feddata")
    assert isinstance(method, FedData) and method.config == FedDataConfig()
