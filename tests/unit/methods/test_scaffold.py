"""SCAFFOLD (option II): zero control variates train as FedAvg; one local SGD step makes every client take
FedAvg's step; c_i+ by hand; the server's c by hand; the global optimum of a convex problem with heterogeneous
clients, where FedAvg with many local steps stays biased; exact resume."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fedaug.api import ClientUpdate, RunContext, TrainSettings
from fedaug.errors import ConfigError
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.scaffold import CONTROL_KEY, DELTA_KEY, Scaffold, ScaffoldConfig
from tests.helpers import killed_in_round
from tests.unit.methods.helpers import (
    assert_equals_fedavg,
    client_context,
    distance_to,
    federated_rounds,
    initial_state,
    method_from_yaml,
    mlp_fn,
    pooled_optimum,
    run_sim,
    skewed_client,
    skewed_convex_clients,
)

WEIGHT_DECAY = 0.05


def test_zero_control_variates_train_as_fedavg(tmp_path: Path) -> None:
    # round 1: c = c_i = 0, the correction adds exactly 0 to every gradient
    assert_equals_fedavg(tmp_path, Scaffold(), rounds=1)


def test_one_local_sgd_step_is_fedavg_in_every_round() -> None:
    # with K = 1, option II makes c_i the gradient at x and c their size-weighted mean, so from round 2
    # every client steps x - lr grad f(x): FedAvg's one-step round (up to float rounding)
    clients = skewed_convex_clients()
    settings = TrainSettings(local_epochs=1, batch_size=30, lr=0.1, optimizer="sgd")
    fedavg = federated_rounds(FedAvg(), clients, settings, rounds=5)
    scaffold = federated_rounds(Scaffold(), clients, settings, rounds=5)
    for key in fedavg:
        torch.testing.assert_close(scaffold[key], fedavg[key], rtol=0, atol=1e-6)


Controls = dict[str, torch.Tensor]


def _client_step(
    form: str, settings: TrainSettings
) -> tuple[ClientUpdate, Controls, Controls, Controls, Controls]:
    """One client update of SCAFFOLD (``form``) from random c and c_i on a 12-sample client; returns the
    update, the start weights, the full-batch CE gradient at them, c and c_i."""
    x, y = skewed_client(num=12)
    start = initial_state(mlp_fn())
    ctx = client_context(x, y)
    gen = torch.Generator().manual_seed(3)
    names = [name for name, _ in ctx.model.named_parameters()]
    c = {name: 0.1 * torch.randn(start[name].shape, generator=gen) for name in names}
    c_i = {name: 0.1 * torch.randn(start[name].shape, generator=gen) for name in names}
    ctx.client_state = c_i
    method = Scaffold(ScaffoldConfig(control_update=form))
    message = method.payload(method.init_server(start, ctx.run), 1, settings)
    message.extra = {CONTROL_KEY: c}
    update = method.client_update(message, ctx)
    model = mlp_fn()()
    model.load_state_dict(start)
    model.train()
    grads = torch.autograd.grad(F.cross_entropy(model(x), y), list(model.parameters()))
    return update, start, dict(zip(names, grads, strict=True)), c, c_i


@pytest.mark.parametrize("form", ["mean_gradient", "displacement"])
def test_option_two_control_variate_by_hand(form: str) -> None:
    # Prepare: random c and c_i; one full-batch SGD step
    settings = TrainSettings(local_epochs=1, batch_size=12, lr=0.05, optimizer="sgd")
    # Execute
    update, start, grads, c, c_i = _client_step(form, settings)
    # Assert: y_i = x - lr (g + c - c_i), and c_i+ = c_i - c + (x - y_i) / lr is g, the gradient at x
    for name, g in grads.items():
        expected = start[name] - 0.05 * (g + c[name] - c_i[name])
        torch.testing.assert_close(update.model_state[name], expected, rtol=0, atol=1e-6)
        torch.testing.assert_close(update.client_state[name], g, rtol=0, atol=2e-4)
        torch.testing.assert_close(update.extra[DELTA_KEY][name], update.client_state[name] - c_i[name])


def test_both_forms_agree_under_plain_sgd_over_many_steps() -> None:
    # 3 epochs of mini-batches of 4 (9 steps): (x - y_i) / (K lr) is the mean of the corrected gradients,
    # so the displacement and the hooks' mean give the same c_i+ (float rounding) and the same weights
    settings = TrainSettings(local_epochs=3, batch_size=4, lr=0.05, optimizer="sgd")
    gradient, *_ = _client_step("mean_gradient", settings)
    displacement, *_ = _client_step("displacement", settings)
    assert gradient.metrics["train/steps"] == 9.0
    for name, value in displacement.client_state.items():
        torch.testing.assert_close(gradient.client_state[name], value, rtol=0, atol=1e-5)
        assert torch.equal(gradient.model_state[name], displacement.model_state[name])


def test_under_adam_only_the_gradient_mean_estimates_the_gradient() -> None:
    # One full-batch Adam step: the mean of the one step's gradients is g + c - c_i, so c_i+ = g, the CE
    # gradient at x; the displacement is Adam's normalised step (about lr a coordinate), so
    # (x - y) / lr - (c - c_i) is not g (what made SCAFFOLD diverge under Adam)
    settings = TrainSettings(local_epochs=1, batch_size=12, lr=0.05, optimizer="adam")
    gradient, _, grads, _, _ = _client_step("mean_gradient", settings)
    displacement, *_ = _client_step("displacement", settings)
    for name, g in grads.items():
        torch.testing.assert_close(gradient.client_state[name], g, rtol=0, atol=1e-6)
    off = max(float((displacement.client_state[n] - g).abs().max()) for n, g in grads.items())
    assert off > 0.1


def test_the_gradient_mean_trains_eagerly_when_graphs_are_asked_for() -> None:
    # the hooks must see every step: engine.cuda_graphs is set aside for this client, and the update is the
    # eager one bit for bit
    settings = TrainSettings(local_epochs=2, batch_size=4, lr=0.01, optimizer="adam")
    eager, *_ = _client_step("mean_gradient", settings)
    asked, *_ = _client_step("mean_gradient", replace(settings, cuda_graphs=True))
    for name, value in eager.client_state.items():
        assert torch.equal(asked.client_state[name], value)
        assert torch.equal(asked.model_state[name], eager.model_state[name])


def test_server_step_by_hand() -> None:
    # 4 clients of 10 samples in all (N = 10); two take part: c <- c + (3/10) dc_0 + (2/10) dc_1
    run = RunContext(
        num_clients=4, num_classes=3, input_shape=(1,), seed=0, num_rounds=1, client_sizes=(3, 2, 4, 1)
    )
    method = Scaffold(ScaffoldConfig(server_lr=2.0))
    state = method.init_server({"w": torch.zeros(1), "bn.running_mean": torch.zeros(1)}, run)
    state.extra[CONTROL_KEY]["w"] = torch.tensor([1.0])
    updates = [
        ClientUpdate(
            0,
            3,
            {"w": torch.tensor([1.0]), "bn.running_mean": torch.tensor([1.0])},
            extra={DELTA_KEY: {"w": torch.tensor([10.0])}},
        ),
        ClientUpdate(
            1,
            2,
            {"w": torch.tensor([6.0]), "bn.running_mean": torch.tensor([6.0])},
            extra={DELTA_KEY: {"w": torch.tensor([-5.0])}},
        ),
    ]
    new = method.server_update(state, updates, run)
    assert new.extra[CONTROL_KEY]["w"].item() == pytest.approx(1.0 + 3.0 - 1.0)
    # x + 2 * (mean - x), mean = (3 * 1 + 2 * 6) / 5 = 3; BN statistics: FedAvg's mean
    assert new.model_state["w"].item() == pytest.approx(6.0)
    assert new.model_state["bn.running_mean"].item() == pytest.approx(3.0)
    assert set(new.extra[CONTROL_KEY]) == {"w"}


def test_reaches_the_global_optimum_where_fedavg_stays_biased() -> None:
    # Prepare: 3 label-skewed clients of a convex problem (logistic regression + weight decay), 20 local SGD
    # steps a round. Measured (squared distance to the pooled optimum): FedAvg 0.0254 after 60 rounds and
    # the same after 200 (its biased fixed point), SCAFFOLD 3.4e-6 after 60.
    clients = skewed_convex_clients()
    optimum = pooled_optimum(clients, WEIGHT_DECAY)
    settings = TrainSettings(
        local_epochs=20, batch_size=30, lr=0.1, optimizer="sgd", weight_decay=WEIGHT_DECAY
    )
    # Execute
    fedavg = distance_to(federated_rounds(FedAvg(), clients, settings, rounds=60), optimum)
    scaffold = distance_to(federated_rounds(Scaffold(), clients, settings, rounds=60), optimum)
    # Assert
    assert fedavg > 1e-2
    assert scaffold < 1e-4


def test_resumed_run_is_identical(tmp_path: Path) -> None:
    # 3 clients, 2 per round: clients come back with a control variate from an earlier round
    full_metrics, full_state = run_sim(tmp_path / "full", Scaffold(), rounds=4, per_round=2)
    killed = killed_in_round(Scaffold, kill_round=3, calls_before_kill=1)
    with pytest.raises(KeyboardInterrupt):
        run_sim(tmp_path / "cut", killed, rounds=4, per_round=2)
    ckpt = torch.load(tmp_path / "cut" / "ckpt" / "latest.pt", weights_only=True)
    cut_metrics, cut_state = run_sim(tmp_path / "cut", Scaffold(), rounds=4, per_round=2)
    assert ckpt["round_num"] == 2 and len(ckpt["client_states"]) >= 2
    assert CONTROL_KEY in ckpt["state"]["extra"]
    assert cut_metrics == full_metrics
    assert (tmp_path / "cut" / "summary.json").read_text() == (tmp_path / "full" / "summary.json").read_text()
    assert all(torch.equal(cut_state[k], full_state[k]) for k in full_state)


def test_yaml_holds_the_defaults() -> None:
    method = method_from_yaml("scaffold")
    assert isinstance(method, Scaffold) and method.config == ScaffoldConfig()


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="server_lr"):
        ScaffoldConfig(server_lr=0.0)
    with pytest.raises(ConfigError, match=r"control_update.*mean_gradient, displacement"):
        ScaffoldConfig(control_update="option1")
