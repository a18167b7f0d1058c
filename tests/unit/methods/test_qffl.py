"""q-FFL (q-FedAvg): weights and update by hand; q = 0 is the plain mean (FedAvg for equal sizes)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedaug.api import ClientUpdate, RunContext, ServerState
from fedaug.errors import ConfigError
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.qffl import QFFL, QFFLConfig, combine, mean_loss, qffl_weights
from tests.unit.methods.helpers import (
    client_context,
    initial_state,
    mlp_fn,
    payload,
    run_sim,
    skewed_client,
)

RUN = RunContext(num_clients=2, num_classes=3, input_shape=(8,), seed=0, num_rounds=1)


def test_weights_by_hand() -> None:
    # q = 2, L = 10, F = 0.5, ||w - w_k||^2 = 0.01: L F^q = 2.5; h = q F^(q-1) L^2 0.01 + 2.5 = 1 + 2.5.
    scale, h = qffl_weights(2.0, 10.0, 0.5, 0.01)
    assert scale == pytest.approx(2.5)
    assert h == pytest.approx(3.5)
    # q = 0: F^0 = 1 and the gradient term vanishes, h = L
    assert qffl_weights(0.0, 10.0, 0.5, 123.0) == pytest.approx((10.0, 10.0))


def test_server_update_by_hand() -> None:
    # w = 0, w_1 = 1, w_2 = 3 with (scale, h) = (1, 2) and (3, 2): c = (1/4, 3/4), w' = 1/4 + 9/4 = 2.5.
    state = ServerState(round_num=0, model_state={"w": torch.zeros(2), "n": torch.tensor(1)})
    updates = [
        ClientUpdate(
            0, 5, {"w": torch.ones(2), "n": torch.tensor(3)}, extra={"qffl_scale": 1.0, "qffl_h": 2.0}
        ),
        ClientUpdate(
            1, 5, {"w": torch.full((2,), 3.0), "n": torch.tensor(2)}, extra={"qffl_scale": 3.0, "qffl_h": 2.0}
        ),
    ]
    new = QFFL().server_update(state, updates, RUN)
    assert new.round_num == 1
    assert new.model_state["w"].tolist() == [2.5, 2.5]
    assert new.model_state["n"].item() == 3  # integer buffers: maximum
    assert QFFL().round_metrics(new) == {"qffl/step": 1.0}


def test_combine_is_a_convex_step_towards_the_clients() -> None:
    out = combine(
        {"w": torch.tensor([2.0])}, [{"w": torch.tensor([4.0])}, {"w": torch.tensor([0.0])}], [0.25, 0.25]
    )
    assert out["w"].item() == pytest.approx(2.0 + 0.5 - 0.5)


def test_client_reports_loss_before_training_and_its_weights() -> None:
    # Prepare
    x, y = skewed_client()
    start = initial_state(mlp_fn())
    ctx = client_context(x, y)
    ctx.model.load_state_dict(start)
    loss = mean_loss(ctx.model, x, y)
    # Execute
    update = QFFL(QFFLConfig(q=1.0)).client_update(payload(start, lr=0.1, local_epochs=1, batch_size=8), ctx)
    # Assert: L = 1/lr = 10; scale = L F; h = F^0 L^2 ||w - w_k||^2 + L F.
    sq = sum(float((start[k] - update.model_state[k]).pow(2).sum()) for k in start)
    assert update.metrics["qffl/loss_before"] == pytest.approx(loss)
    assert update.extra["qffl_scale"] == pytest.approx(10 * loss)
    assert update.extra["qffl_h"] == pytest.approx(100 * sq + 10 * loss, rel=1e-6)


def test_q_zero_is_fedavg_for_equal_client_sizes(tmp_path: Path) -> None:
    # make_spec's clients hold 20 samples each, so FedAvg's size weights are equal: q = 0 gives the same
    # weights up to float rounding (w + mean(w_k - w) in float64 versus the weighted mean).
    _, fedavg = run_sim(tmp_path / "fedavg", FedAvg(), rounds=3)
    _, qffl = run_sim(tmp_path / "qffl", QFFL(QFFLConfig(q=0.0)), rounds=3)
    for key in fedavg:
        torch.testing.assert_close(qffl[key], fedavg[key], rtol=0, atol=1e-6)


def test_larger_q_weights_the_worse_client_more() -> None:
    # Two clients with equal displacement; the one with 4x the loss gets 4^q times the coefficient.
    def coefficient_ratio(q: float) -> float:
        high = qffl_weights(q, 1.0, 2.0, 0.0)
        low = qffl_weights(q, 1.0, 0.5, 0.0)
        return high[0] / low[0]

    assert coefficient_ratio(0.0) == pytest.approx(1.0)
    assert coefficient_ratio(1.0) == pytest.approx(4.0)
    assert coefficient_ratio(2.0) == pytest.approx(16.0)


@pytest.mark.parametrize("options", [{"q": -1.0}, {"q": float("nan")}, {"lipschitz": 0.0}])
def test_config_validation(options: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match=next(iter(options))):
        QFFLConfig(**options)
