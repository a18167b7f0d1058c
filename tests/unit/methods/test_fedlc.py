"""FedLC: tau = 0 is FedAvg, the shift values by hand, missing classes left alone, validation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fedaug.errors import ConfigError
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.fedlc import MISSING_CLASS_COUNT, FedLC, FedLCConfig
from fedaug.methods.parts.losses import calibration_shift
from tests.unit.methods.helpers import (
    assert_equals_fedavg,
    client_context,
    initial_state,
    method_from_yaml,
    mlp_fn,
    payload,
    run_sim,
    skewed_client,
)


def test_tau_zero_is_fedavg_exactly(tmp_path: Path) -> None:
    assert_equals_fedavg(tmp_path, FedLC(FedLCConfig(calibration_tau=0.0)), rounds=2, per_round=2)
    # FedLC logs the same keys as FedAvg, so the whole metrics file is identical.
    assert run_sim(tmp_path / "again", FedLC(FedLCConfig(calibration_tau=0.0)), rounds=2, per_round=2)[0] == (
        (tmp_path / "fedavg" / "metrics.jsonl").read_text()
    )


def test_shift_values_by_hand() -> None:
    # 16^(-1/4) = 0.5, 1^(-1/4) = 1, and a missing class counts as 1e-6: (1e-6)^(-1/4) = 10^1.5 = 31.6228.
    shift = calibration_shift(torch.tensor([16, 1, 0]), 0.5, MISSING_CLASS_COUNT)
    torch.testing.assert_close(shift, torch.tensor([0.25, 0.5, 0.5 * 10**1.5]))
    assert calibration_shift(torch.tensor([16, 1, 0]), 0.0, MISSING_CLASS_COUNT).abs().sum() == 0


def test_loss_is_ce_of_calibrated_logits() -> None:
    # Prepare: a client with 16 samples of class 0, 1 of class 1 and none of class 2.
    x, _ = skewed_client(num=17)
    y = torch.tensor([0] * 16 + [1])
    ctx = client_context(x, y)
    # Execute
    out = FedLC(FedLCConfig(calibration_tau=0.5)).loss_fn(payload(initial_state(mlp_fn())), ctx)(
        ctx.model, x, y
    )
    # Assert
    expected = F.cross_entropy(ctx.model(x) - torch.tensor([0.25, 0.5, 0.5 * 10**1.5]), y)
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert out.logs["ce"].item() == pytest.approx(expected.item(), rel=1e-6)


def test_calibration_stops_pushing_down_the_missing_class() -> None:
    # Prepare: a client without class 2; under CE the class-2 row of the classifier is pushed down.
    x, y = skewed_client(classes=(0, 1))
    start = initial_state(mlp_fn())
    settings = {"local_epochs": 3, "batch_size": 8}
    # Execute
    fedavg = FedAvg().client_update(payload(start, **settings), client_context(x, y))
    fedlc = FedLC(FedLCConfig(calibration_tau=1.0)).client_update(
        payload(start, **settings), client_context(x, y)
    )

    # Assert: with a shift of 31.6 its softmax probability is ~e^-31, so its row barely moves.
    def moved(state: dict[str, torch.Tensor]) -> float:
        return float((state["classifier.weight"][2] - start["classifier.weight"][2]).norm())

    assert moved(fedlc.model_state) < 0.01 * moved(fedavg.model_state)


@pytest.mark.parametrize("bad", [-0.5, float("inf")])
def test_config_rejects_bad_tau(bad: float) -> None:
    with pytest.raises(ConfigError, match=rf"calibration_tau .* got {bad}"):
        FedLCConfig(calibration_tau=bad)


def test_yaml_holds_the_defaults() -> None:
    method = method_from_yaml("fedlc")
    assert isinstance(method, FedLC)
    assert method.config == FedLCConfig() == FedLCConfig(calibration_tau=1.0)
