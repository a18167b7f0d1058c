"""Fairness metrics: variances on hand-made numbers, per-client local accuracies, engine and runner wiring."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

from fedaug.config.load import load_config
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.fairness import client_accuracies, fairness_summary, local_metrics, spread
from fedaug.engine.simulation import Simulation
from fedaug.runs.runner import run_experiment
from tests.conftest import REPO_ROOT, make_spec


class FirstEntry(nn.Module):
    """Predicts the class written in the first input entry (a model with known accuracies)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(x[:, 0].long(), 3).float()


def test_spread_on_hand_made_numbers() -> None:
    # mean 0.7; population variance ((-0.2)^2 + 0 + 0.2^2) / 3 = 0.08 / 3
    mean, var = spread(torch.tensor([0.5, 0.7, 0.9]))
    assert mean == pytest.approx(0.7)
    assert var == pytest.approx(0.08 / 3)
    # NaN (a client without local test data) is skipped; one value has variance 0
    assert spread(torch.tensor([0.25, math.nan])) == (0.25, 0.0)
    metrics = local_metrics(torch.tensor([1.0, 0.0]))
    assert metrics == {"local/acc_mean": 0.5, "local/acc_var": 0.25}


def test_client_accuracies_split_one_pass_back_per_client() -> None:
    # Prepare: 6 samples; the model predicts x[:, 0]; samples 0, 2, 4 are predicted right.
    x = torch.tensor([[0.0], [1.0], [2.0], [0.0], [1.0], [2.0]])
    y = torch.tensor([0, 0, 2, 2, 1, 1])
    clients = [
        torch.tensor([0, 1]),
        torch.tensor([2, 3, 4]),
        torch.tensor([5]),
        torch.tensor([], dtype=torch.long),
    ]
    # Execute (batch 4 cuts across clients)
    acc = client_accuracies(FirstEntry(), x, y, clients, batch_size=4)
    # Assert: 1/2, 2/3, 0/1, and NaN for the client without samples.
    assert acc[:3].tolist() == pytest.approx([0.5, 2 / 3, 0.0])
    assert math.isnan(acc[3].item())


def test_fairness_summary_final_and_last10() -> None:
    records = [
        {"round": 1, "test/acc": 0.5, "test/class_acc_var": 0.04},
        {
            "round": 2,
            "test/acc": 0.6,
            "test/class_acc_var": 0.02,
            "local/acc_mean": 0.7,
            "local/acc_var": 0.01,
        },
        {
            "round": 3,
            "test/acc": 0.7,
            "test/class_acc_var": 0.03,
            "local/acc_mean": 0.8,
            "local/acc_var": 0.03,
        },
    ]
    summary = fairness_summary(records, last=2)
    assert summary["global_acc_final"] == 0.7
    assert summary["global_acc_last10"] == pytest.approx(0.65)
    assert summary["class_acc_var_final"] == 0.03
    assert summary["class_acc_var_last10"] == pytest.approx(0.025)
    assert summary["local_acc_mean_final"] == 0.8
    assert summary["local_acc_var_last10"] == pytest.approx(0.02)
    assert "local_acc_mean_final" not in fairness_summary(records[:1])


def test_fairness_last10_covers_the_last_rounds_not_the_last_evaluations() -> None:
    # Local tests every 5 rounds of 20 (values 0.1, 0.2, 0.3, 0.4), the global test every round (round / 100).
    records = [
        {"round": r, "test/acc": r / 100, **({"local/acc_var": r / 50} if r % 5 == 0 else {})}
        for r in range(1, 21)
    ]
    summary = fairness_summary(records, last=10)
    assert summary["local_acc_var_last10"] == pytest.approx((0.3 + 0.4) / 2)  # rounds 15 and 20 only
    assert summary["global_acc_last10"] == pytest.approx(sum(range(11, 21)) / 10 / 100)
    assert summary["local_acc_var_final"] == 0.4


def test_engine_logs_local_accuracies_every_k_rounds_and_at_the_end(tmp_path: Path) -> None:
    # Prepare: 3 clients, each with 4 local test samples taken from the train tensors.
    spec = make_spec(tmp_path, rounds=3, per_round=2)
    local = [idx[:4] for idx in spec.client_indices]
    spec = replace(spec, local_test_indices=local, local_eval_every=2)
    # Execute
    summary = Simulation(spec).run()
    records = read_jsonl(tmp_path / "metrics.jsonl")
    # Assert: rounds 2 and 3 (the last) carry the client-level metrics; they agree with the per-client list.
    assert ["local/acc_mean" in r for r in records] == [False, True, True]
    last = records[-1]
    assert len(last["local/acc"]) == 3
    accs = torch.tensor(last["local/acc"])
    assert last["local/acc_mean"] == pytest.approx(float(accs.mean()))
    assert last["local/acc_var"] == pytest.approx(float(accs.var(unbiased=False)))
    assert all(a * 4 == round(a * 4) for a in last["local/acc"])  # multiples of 1/4
    assert summary["local_acc_var_final"] == last["local/acc_var"]
    assert summary["class_acc_var_final"] == last["test/class_acc_var"]


def test_runner_uses_the_partitions_local_test_split(tmp_path: Path) -> None:
    config = load_config(
        [REPO_ROOT / "configs" / "smoke.yaml"],
        [
            f"out_dir={tmp_path}",
            "partition.local_test_fraction=0.25",
            "train.rounds=2",
            "engine.progress=false",
        ],
    )
    summary = run_experiment(config)
    assert 0 <= summary["local_acc_mean_final"] <= 1
    assert summary["local_acc_var_final"] >= 0
