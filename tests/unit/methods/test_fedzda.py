"""Fed-ZDAC / Fed-ZDAS: FedAvg before the start round and with zero samples, augmentation when on, errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedaug.engine.checkpoint import read_jsonl
from fedaug.errors import ConfigError, IncompatibleModelError
from fedaug.methods.fedzda.method import FedZDAC, FedZDAS, ZDAConfig, ZDASConfig
from fedaug.models import build_model
from tests.unit.methods.helpers import assert_equals_fedavg, bn_mlp, run_sim

FAST = {"gen_iterations": 5, "samples_per_class": 2}


def test_zdas_with_zero_synthetic_samples_is_fedavg_exactly(tmp_path: Path) -> None:
    method = FedZDAS(ZDASConfig(start_round=1, samples_per_class=0))
    assert_equals_fedavg(tmp_path, method, rounds=2, per_round=2, model_fn=bn_mlp)


@pytest.mark.parametrize("cls", [FedZDAC, FedZDAS])
def test_rounds_before_start_are_fedavg_exactly(tmp_path: Path, cls: type) -> None:
    config = (ZDASConfig if cls is FedZDAS else ZDAConfig)(start_round=3, **FAST)
    assert_equals_fedavg(tmp_path, cls(config), rounds=2, per_round=2, model_fn=bn_mlp)


def test_zdac_clients_train_on_real_plus_synthetic(tmp_path: Path) -> None:
    # Prepare / Execute: augmentation from round 2 of 2, 2 samples of each of the 3 classes per client.
    method = FedZDAC(ZDAConfig(start_round=2, **FAST))
    _, fedavg_state = run_sim(
        tmp_path / "fedavg", FedZDAC(ZDAConfig(start_round=3)), rounds=2, model_fn=bn_mlp
    )
    _, state = run_sim(tmp_path / "zdac", method, rounds=2, model_fn=bn_mlp)
    records = read_jsonl(tmp_path / "zdac" / "metrics.jsonl")
    # Assert: round 1 logs nothing of ZDAC; round 2 logs 6 synthetic samples per client; weights differ.
    assert "zdac/synthetic" not in records[0]
    assert records[1]["zdac/synthetic"] == 6.0
    assert 0.0 <= records[1]["zdac/gen_acc"] <= 1.0
    assert records[1]["train/steps"] > records[0]["train/steps"]  # 20 real + 6 synthetic samples, batch 8
    assert not torch.equal(state["classifier.weight"], fedavg_state["classifier.weight"])


def test_zdas_server_generates_from_every_client_model_and_trains(tmp_path: Path) -> None:
    method = FedZDAS(ZDASConfig(start_round=1, **FAST))
    _, fedavg_state = run_sim(tmp_path / "fedavg", FedZDAS(ZDASConfig(samples_per_class=0)), model_fn=bn_mlp)
    _, state = run_sim(tmp_path / "zdas", method, model_fn=bn_mlp)
    _, again = run_sim(tmp_path / "again", method, model_fn=bn_mlp)
    records = read_jsonl(tmp_path / "zdas" / "metrics.jsonl")
    # 3 client models x 3 classes x 2 samples = 18 samples, 1 epoch of batch 10 = 2 server steps
    assert [r["zdas/synthetic"] for r in records] == [18.0, 18.0]
    assert all(r["zdas/server_loss"] > 0 for r in records)
    assert not torch.equal(state["classifier.weight"], fedavg_state["classifier.weight"])
    assert all(torch.equal(state[k], again[k]) for k in state)  # deterministic


def test_zdas_frozen_server_batchnorm_keeps_the_aggregated_running_statistics(tmp_path: Path) -> None:
    # Prepare: one round, so the clients of all three runs train the same initial model
    def run(name: str, **options: object) -> dict[str, torch.Tensor]:
        return run_sim(
            tmp_path / name, FedZDAS(ZDASConfig(start_round=1, **options)), rounds=1, model_fn=bn_mlp
        )[1]

    # Execute
    fedavg = run("fedavg", samples_per_class=0)
    frozen = run("frozen", server_batchnorm="frozen", **FAST)
    trained = run("train", **FAST)
    # Assert: frozen keeps FedAvg's aggregated BN statistics exactly and trains the weights; train moves both
    stats = [k for k in fedavg if "running" in k or "num_batches" in k]
    assert len(stats) == 3
    assert all(torch.equal(frozen[k], fedavg[k]) for k in stats)
    assert not torch.equal(frozen["classifier.weight"], fedavg["classifier.weight"])
    assert not torch.equal(trained["blocks.0.1.running_mean"], fedavg["blocks.0.1.running_mean"])


@pytest.mark.parametrize("cls", [FedZDAC, FedZDAS])
def test_model_without_batch_norm_fails_before_training(tmp_path: Path, cls: type) -> None:
    def mlp() -> torch.nn.Module:
        return build_model("mlp", num_classes=3, input_shape=(8,))

    with pytest.raises(IncompatibleModelError, match=rf"{cls.name}: .*BatchNorm"):
        run_sim(tmp_path, cls(), model_fn=mlp)


@pytest.mark.parametrize(
    ("cls", "options", "match"),
    [
        (ZDAConfig, {"start_round": 0}, "start_round"),
        (ZDAConfig, {"samples_per_class": -1}, "samples_per_class"),
        (ZDAConfig, {"gen_lr": 0.0}, "gen_lr"),
        (ZDAConfig, {"gen_bn_norm": "l1"}, "gen_bn_norm"),
        (ZDASConfig, {"server_optimizer": "lbfgs"}, "server_optimizer"),
        (ZDASConfig, {"server_epochs": 0}, "server_epochs"),
        (ZDAConfig, {"gen_ce_weight": -1.0}, r"method.gen_ce_weight must be a finite number >= 0, got -1.0"),
        (ZDAConfig, {"gen_tv_weight": float("nan")}, "gen_tv_weight must be a finite number >= 0, got nan"),
        (ZDASConfig, {"server_batch_size": 0}, r"method.server_batch_size must be >= 1, got 0"),
        (ZDASConfig, {"server_lr": float("inf")}, "server_lr must be a finite number > 0, got inf"),
        (
            ZDASConfig,
            {"server_batchnorm": "eval"},
            "server_batchnorm must be one of train, frozen, got 'eval'",
        ),
    ],
)
def test_config_validation(cls: type, options: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        cls(**options)
