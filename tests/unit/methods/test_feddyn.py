"""FedDyn: alpha 0 is FedAvg; the regularised loss, g_k and the server's h and theta by hand; the global
optimum of a convex problem with heterogeneous clients, where FedAvg with many local steps stays biased;
exact resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fedaug.api import ClientUpdate, RunContext, TrainSettings
from fedaug.errors import ConfigError
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.feddyn import H_KEY, FedDyn, FedDynConfig
from tests.helpers import killed_in_round
from tests.unit.methods.helpers import (
    assert_equals_fedavg,
    client_context,
    distance_to,
    federated_rounds,
    initial_state,
    method_from_yaml,
    mlp_fn,
    payload,
    pooled_optimum,
    run_sim,
    skewed_client,
    skewed_convex_clients,
)

WEIGHT_DECAY = 0.05


def test_alpha_zero_is_fedavg(tmp_path: Path) -> None:
    assert_equals_fedavg(tmp_path, FedDyn(FedDynConfig(alpha=0.0)), rounds=3, per_round=2)


def test_loss_and_kept_gradient_by_hand() -> None:
    # Prepare: a previous gradient g_k and weights w away from theta
    x, y = skewed_client(num=12)
    theta = initial_state(mlp_fn())
    gen = torch.Generator().manual_seed(5)
    g = {k: torch.randn(v.shape, generator=gen) for k, v in theta.items()}
    ctx = client_context(x, y, client_state=g)
    method = FedDyn(FedDynConfig(alpha=0.3))
    message = payload(theta, local_epochs=1, batch_size=12, lr=0.05, optimizer="sgd")
    model = mlp_fn()()
    w = {k: v + 0.1 * torch.randn(v.shape, generator=gen) for k, v in theta.items()}
    model.load_state_dict(w)
    # Execute
    out = method.loss_fn(message, ctx)(model, x, y)
    # Assert: CE - <g, w> + alpha/2 ||w - theta||^2
    with torch.no_grad():
        ce = F.cross_entropy(model(x), y)
        linear = sum((g[k] * w[k]).sum() for k in w)
        prox = 0.15 * sum((w[k] - theta[k]).pow(2).sum() for k in w)
    assert out.loss.item() == pytest.approx(float(ce - linear + prox), rel=1e-5)
    # Execute: one update; Assert: g_k <- g_k - alpha (theta_k - theta)
    update = method.client_update(message, client_context(x, y, client_state=g))
    for k in theta:
        expected = g[k] - 0.3 * (update.model_state[k] - theta[k])
        torch.testing.assert_close(update.client_state[k], expected)


def test_server_step_by_hand() -> None:
    # N = 10 samples over 4 clients; clients of 3 and 2 samples move theta = 0 to 1 and 6, alpha = 0.5
    run = RunContext(
        num_clients=4, num_classes=3, input_shape=(1,), seed=0, num_rounds=1, client_sizes=(3, 2, 4, 1)
    )
    method = FedDyn(FedDynConfig(alpha=0.5))
    state = method.init_server({"w": torch.zeros(1), "bn.running_var": torch.ones(1)}, run)
    updates = [
        ClientUpdate(0, 3, {"w": torch.tensor([1.0]), "bn.running_var": torch.tensor([1.0])}),
        ClientUpdate(1, 2, {"w": torch.tensor([6.0]), "bn.running_var": torch.tensor([6.0])}),
    ]
    new = method.server_update(state, updates, run)
    # h = 0 - 0.5 (0.3 * 1 + 0.2 * 6) = -0.75; theta = mean - h / alpha = 3 + 1.5
    assert new.extra[H_KEY]["w"].item() == pytest.approx(-0.75)
    assert new.model_state["w"].item() == pytest.approx(4.5)
    assert new.model_state["bn.running_var"].item() == pytest.approx(3.0)


def test_reaches_the_global_optimum_where_fedavg_stays_biased() -> None:
    # Measured (squared distance to the pooled optimum): FedAvg 0.0254 after 60 rounds (and after 200: its
    # biased fixed point), FedDyn with alpha 0.1 2.3e-7 after 60.
    clients = skewed_convex_clients()
    optimum = pooled_optimum(clients, WEIGHT_DECAY)
    settings = TrainSettings(
        local_epochs=20, batch_size=30, lr=0.1, optimizer="sgd", weight_decay=WEIGHT_DECAY
    )
    fedavg = distance_to(federated_rounds(FedAvg(), clients, settings, rounds=60), optimum)
    feddyn = distance_to(
        federated_rounds(FedDyn(FedDynConfig(alpha=0.1)), clients, settings, rounds=60), optimum
    )
    assert fedavg > 1e-2
    assert feddyn < 1e-4


def test_resumed_run_is_identical(tmp_path: Path) -> None:
    full_metrics, full_state = run_sim(tmp_path / "full", FedDyn(), rounds=4, per_round=2)
    killed = killed_in_round(FedDyn, kill_round=3, calls_before_kill=1)
    with pytest.raises(KeyboardInterrupt):
        run_sim(tmp_path / "cut", killed, rounds=4, per_round=2)
    ckpt = torch.load(tmp_path / "cut" / "ckpt" / "latest.pt", weights_only=True)
    cut_metrics, cut_state = run_sim(tmp_path / "cut", FedDyn(), rounds=4, per_round=2)
    assert ckpt["round_num"] == 2 and len(ckpt["client_states"]) >= 2
    assert any(bool(h.abs().sum() > 0) for h in ckpt["state"]["extra"][H_KEY].values())
    assert cut_metrics == full_metrics
    assert (tmp_path / "cut" / "summary.json").read_text() == (tmp_path / "full" / "summary.json").read_text()
    assert all(torch.equal(cut_state[k], full_state[k]) for k in full_state)


def test_yaml_holds_the_defaults() -> None:
    method = method_from_yaml("feddyn")
    assert isinstance(method, FedDyn) and method.config == FedDynConfig()


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="alpha"):
        FedDynConfig(alpha=-0.1)
