"""FedNTD: beta = 0 is FedAvg, the not-true KL by hand, the frozen teacher, its preserving effect."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from fedaug.errors import ConfigError
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.fedntd import FedNTD, FedNTDConfig
from fedaug.methods.parts.losses import not_true_distillation, not_true_logits
from fedaug.types import StateDict
from tests.unit.methods.helpers import (
    assert_equals_fedavg,
    client_context,
    initial_state,
    method_from_yaml,
    mlp_fn,
    payload,
    skewed_client,
)


def _sigmoid(v: float) -> float:
    return 1 / (1 + math.exp(-v))


def test_beta_zero_is_fedavg_exactly(tmp_path: Path) -> None:
    assert_equals_fedavg(tmp_path, FedNTD(FedNTDConfig(ntd_beta=0.0)), rounds=2, per_round=2)


def test_not_true_logits_drop_the_true_column() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    torch.testing.assert_close(
        not_true_logits(logits, torch.tensor([0, 2])), torch.tensor([[2.0, 3.0], [4.0, 5.0]])
    )


def test_not_true_kl_by_hand_on_three_classes() -> None:
    # True class 0 (its logits 5 and -3 do not enter): local not-true logits (0, 0) -> p_local = (1/2, 1/2);
    # global (1, 0) -> p_global = (s(1), s(-1)). KL(p_global || p_local) = sum_c p_g log(2 p_g).
    local, glob, label = torch.tensor([[5.0, 0.0, 0.0]]), torch.tensor([[-3.0, 1.0, 0.0]]), torch.tensor([0])
    p_global = (_sigmoid(1), _sigmoid(-1))
    expected = sum(p * math.log(2 * p) for p in p_global)  # 0.1109; the reverse KL would be 0.1201
    assert not_true_distillation(local, glob, label, 1.0).item() == pytest.approx(expected, rel=1e-6)
    other_true = not_true_distillation(
        local + torch.tensor([[9.0, 0, 0]]), glob - torch.tensor([[9.0, 0, 0]]), label, 1.0
    )
    assert other_true.item() == pytest.approx(expected, rel=1e-6)
    # T = 2: logits halved, then the KL times T^2 = 4.
    p_global = (_sigmoid(0.5), _sigmoid(-0.5))
    expected = 4 * sum(p * math.log(2 * p) for p in p_global)
    assert not_true_distillation(local, glob, label, 2.0).item() == pytest.approx(expected, rel=1e-6)
    # No gradient reaches the global logits.
    glob.requires_grad_(True)
    not_true_distillation(local.requires_grad_(True), glob, label, 1.0).backward()
    assert glob.grad is None and local.grad is not None


def test_teacher_is_the_frozen_global_model() -> None:
    # Prepare
    x, y = skewed_client(classes=(0,))
    start = initial_state(mlp_fn())
    ctx = client_context(x, y)
    assert ctx.workspace is not None
    # Execute
    update = FedNTD().client_update(payload(start, local_epochs=2, batch_size=8), ctx)
    # Assert: the teacher still holds the broadcast weights, in eval mode, without gradients.
    teacher = ctx.workspace("teacher")
    assert not teacher.training
    assert all(torch.equal(teacher.state_dict()[k], start[k]) for k in start)
    assert all(p.grad is None for p in teacher.parameters())
    assert update.metrics["train/ntd"] > 0


def test_distillation_preserves_the_global_not_true_knowledge() -> None:
    # Prepare: a one-class client; plain CE reshapes the scores of the two classes it never sees.
    x, y = skewed_client(classes=(0,))
    start = initial_state(mlp_fn())
    settings = {"local_epochs": 5, "batch_size": 8, "lr": 1e-2}

    def not_true_gap(state: StateDict) -> float:
        local, glob = mlp_fn()(), mlp_fn()()
        local.load_state_dict(state)
        glob.load_state_dict(start)
        with torch.no_grad():
            return not_true_distillation(local(x), glob(x), y, 1.0).item()

    # Execute
    fedavg = FedAvg().client_update(payload(start, **settings), client_context(x, y))
    fedntd = FedNTD(FedNTDConfig(ntd_beta=1.0)).client_update(
        payload(start, **settings), client_context(x, y)
    )
    # Assert
    assert not_true_gap(fedntd.model_state) < 0.5 * not_true_gap(fedavg.model_state)


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [("ntd_beta", {"ntd_beta": -1.0}), ("ntd_tau", {"ntd_tau": 0.0}), ("ntd_tau", {"ntd_tau": float("nan")})],
)
def test_config_rejects_bad_values(field: str, kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match=rf"{field} .* got {kwargs[field]}"):
        FedNTDConfig(**kwargs)


def test_yaml_holds_the_defaults() -> None:
    method = method_from_yaml("fedntd")
    assert isinstance(method, FedNTD)
    assert method.config == FedNTDConfig() == FedNTDConfig(ntd_beta=1.0, ntd_tau=1.0)
