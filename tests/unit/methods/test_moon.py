"""MOON: the contrastive loss by hand, first participation = FedAvg, client state, its pull, exact resume."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fedaug.engine.checkpoint import read_jsonl
from fedaug.errors import ConfigError
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.moon import MOON, MOONConfig
from fedaug.methods.parts.losses import model_contrastive_loss
from fedaug.types import StateDict
from tests.helpers import killed_in_round
from tests.unit.methods.helpers import (
    client_context,
    initial_state,
    method_from_yaml,
    mlp_fn,
    payload,
    run_sim,
    skewed_client,
)

SETTINGS = {"local_epochs": 3, "batch_size": 8, "lr": 1e-2}


def test_contrastive_loss_by_hand() -> None:
    # cos(z, z_glob) = 1/sqrt(2), cos(z, z_prev) = 0; with t = 0.5 the logits are (sqrt(2), 0), so the loss
    # is -log(e^sqrt(2) / (e^sqrt(2) + 1)) = log(1 + e^-sqrt(2)).
    z, z_glob, z_prev = torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 1.0]]), torch.tensor([[0.0, 1.0]])
    expected = math.log(1 + math.exp(-math.sqrt(2)))
    assert model_contrastive_loss(z, z_glob, z_prev, 0.5).item() == pytest.approx(expected, rel=1e-6)
    # Swapping the positive and the negative pair gives log(1 + e^sqrt(2)).
    swapped = model_contrastive_loss(z, z_prev, z_glob, 0.5).item()
    assert swapped == pytest.approx(math.log(1 + math.exp(math.sqrt(2))), rel=1e-6)


def test_first_participation_is_fedavg_and_returns_the_local_weights() -> None:
    # Prepare
    x, y = skewed_client()
    start = initial_state(mlp_fn())
    # Execute
    fedavg = FedAvg().client_update(payload(start, **SETTINGS), client_context(x, y))
    moon = MOON().client_update(payload(start, **SETTINGS), client_context(x, y))
    # Assert: no previous model -> no contrastive term (as in the official code's first round).
    assert all(torch.equal(moon.model_state[k], fedavg.model_state[k]) for k in fedavg.model_state)
    assert moon.metrics["train/contrastive"] == 0.0
    assert moon.client_state.keys() == moon.model_state.keys()
    assert all(torch.equal(moon.client_state[k], moon.model_state[k]) for k in moon.model_state)


def _mean_cosine_to_global(state: StateDict, start: StateDict, x: torch.Tensor) -> float:
    local, glob = mlp_fn()(), mlp_fn()()
    local.load_state_dict(state)
    glob.load_state_dict(start)
    with torch.no_grad():
        return F.cosine_similarity(local.penultimate(x), glob.penultimate(x), dim=-1).mean().item()


def test_contrastive_term_pulls_the_representation_to_the_global_model() -> None:
    # Prepare: the previous local model is where plain local training on this client ends up.
    x, y = skewed_client(classes=(0,))
    start = initial_state(mlp_fn())
    fedavg = FedAvg().client_update(payload(start, **SETTINGS), client_context(x, y))
    # Execute
    ctx = client_context(x, y, client_state=fedavg.model_state)
    moon = MOON().client_update(payload(start, **SETTINGS), ctx)
    # Assert
    assert moon.metrics["train/contrastive"] > 0
    moon_cosine = _mean_cosine_to_global(moon.model_state, start, x)
    assert moon_cosine > _mean_cosine_to_global(fedavg.model_state, start, x)  # measured: 0.949 vs 0.912


def test_resumed_run_is_identical(tmp_path: Path) -> None:
    # Prepare: 3 clients, 2 per round, so clients return with a previous model from an earlier round.
    full_metrics, full_state = run_sim(tmp_path / "full", MOON(), rounds=4, per_round=2)
    # Execute: kill in round 3 after one client, then resume with a fresh method object.
    killed = killed_in_round(MOON, kill_round=3, calls_before_kill=1)
    with pytest.raises(KeyboardInterrupt):
        run_sim(tmp_path / "cut", killed, rounds=4, per_round=2)
    ckpt = torch.load(tmp_path / "cut" / "ckpt" / "latest.pt", weights_only=True)
    cut_metrics, cut_state = run_sim(tmp_path / "cut", MOON(), rounds=4, per_round=2)
    # Assert: the checkpoint carried client states and the resumed run matches exactly.
    assert ckpt["round_num"] == 2 and len(ckpt["client_states"]) >= 2
    assert cut_metrics == full_metrics
    assert (tmp_path / "cut" / "summary.json").read_text() == (tmp_path / "full" / "summary.json").read_text()
    assert all(torch.equal(cut_state[k], full_state[k]) for k in full_state)
    assert any(record["train/contrastive"] > 0 for record in read_jsonl(tmp_path / "full" / "metrics.jsonl"))


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("contrastive_mu", {"contrastive_mu": -1.0}),
        ("contrastive_temperature", {"contrastive_temperature": 0.0}),
        ("contrastive_temperature", {"contrastive_temperature": float("inf")}),
    ],
)
def test_config_rejects_bad_values(field: str, kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match=rf"{field} .* got {kwargs[field]}"):
        MOONConfig(**kwargs)


def test_yaml_holds_the_defaults() -> None:
    method = method_from_yaml("moon")
    assert isinstance(method, MOON)
    assert method.config == MOONConfig() == MOONConfig(contrastive_mu=1.0, contrastive_temperature=0.5)
