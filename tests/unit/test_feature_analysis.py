"""``fedaug analyze features``: the Davies-Bouldin score (checked against scikit-learn) and the one-round
feature analysis end to end on a tiny run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedaug.cli.main import main
from fedaug.results import features
from fedaug.results.features import davies_bouldin, iid_clients
from tests.conftest import REPO_ROOT

sklearn_metrics = pytest.importorskip("sklearn.metrics")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_davies_bouldin_equals_scikit_learn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 5, size=300)
    features = rng.normal(size=(300, 16)) + 0.7 * labels[:, None] * rng.normal(size=16)
    expected = sklearn_metrics.davies_bouldin_score(features, labels)
    assert davies_bouldin(torch.from_numpy(features), torch.from_numpy(labels)) == pytest.approx(
        expected, rel=1e-12
    )


def test_davies_bouldin_hand_made_and_degenerate_cases() -> None:
    # Two clusters of two points each: centroids 0 and 4, mean distances to them 1 and 1: (1 + 1) / 4.
    features = torch.tensor([[-1.0], [1.0], [3.0], [5.0]])
    labels = torch.tensor([0, 0, 1, 1])
    assert davies_bouldin(features, labels) == pytest.approx(0.5)
    same = torch.zeros(4, 3)
    assert davies_bouldin(same, labels) == sklearn_metrics.davies_bouldin_score(same.numpy(), labels) == 0.0
    with pytest.raises(ValueError, match="at least 2 clusters, got 1"):
        davies_bouldin(features, torch.zeros(4, dtype=torch.long))


def test_iid_clients_are_disjoint_and_refuse_more_samples_than_exist() -> None:
    clients = iid_clients(torch.zeros(100, dtype=torch.long), 4, 20, seed=0)
    joined = torch.cat(clients)
    assert [len(c) for c in clients] == [20] * 4 and joined.unique().numel() == 80
    with pytest.raises(ValueError, match="5 clients of 30 samples need 150 training samples"):
        iid_clients(torch.zeros(100, dtype=torch.long), 5, 30, seed=0)


def test_feature_analysis_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    smoke = str(REPO_ROOT / "configs" / "smoke.yaml")
    sets = ["train.rounds=2", "engine.keep_checkpoints=[1]", "engine.device=cpu"]
    assert (
        main(["run", smoke, "--out-dir", str(tmp_path / "runs"), *[a for s in sets for a in ("--set", s)]])
        == 0
    )
    run_dir = next(p for p in (tmp_path / "runs").rglob("seed0") if p.parent.name == "fedavg")
    out = tmp_path / "features"
    args = ["--plentiful", "60", "--plentiful-clients", "3", "--scarce", "20", "--scarce-clients", "9"]
    assert main(["analyze", "features", f"{run_dir}@1", "--out", str(out), *args, "--device", "cpu"]) == 0
    result = json.loads((out / "features.json").read_text())
    assert result["start"]["round"] == 1
    groups = [(g["method"], g["clients"], g["samples_per_client"]) for g in result["groups"]]
    assert groups == [("fedavg", 3, 60), ("fedavg", 9, 20), ("flea", 9, 20)]
    flea = result["groups"][2]
    assert flea["shared_features"] == 9 * 2  # each of the 9 clients shares 10% of its 20 samples
    assert all(np.isfinite(g["global_db_test"]) and g["local_db_train"]["mean"] > 0 for g in result["groups"])
    assert "| scarce (20) | flea | 9 |" in capsys.readouterr().out
    assert (out / "features.png").exists()


def test_feature_analysis_refuses_a_round_without_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    smoke = str(REPO_ROOT / "configs" / "smoke.yaml")
    assert main(["run", smoke, "--out-dir", str(tmp_path / "runs"), "--set", "train.rounds=1"]) == 0
    run_dir = next(p for p in (tmp_path / "runs").rglob("seed0") if p.parent.name == "fedavg")
    capsys.readouterr()
    assert main(["analyze", "features", f"{run_dir}@7", "--out", str(tmp_path / "f")]) == 2
    assert "no checkpoint for round 7" in capsys.readouterr().err
    assert not (tmp_path / "f").exists()


def test_feature_analysis_refuses_more_samples_than_the_dataset_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    smoke = str(REPO_ROOT / "configs" / "smoke.yaml")
    assert main(["run", smoke, "--out-dir", str(tmp_path / "runs"), "--set", "train.rounds=1"]) == 0
    run_dir = next(p for p in (tmp_path / "runs").rglob("seed0") if p.parent.name == "fedavg")
    capsys.readouterr()
    monkeypatch.setattr(features, "one_round", lambda *a, **k: pytest.fail("trained before the check"))
    # the plentiful arm fits (3 x 60 of the smoke data's 600); the scarce arm, trained second, does not
    args = ["--plentiful", "60", "--plentiful-clients", "3", "--scarce", "100", "--scarce-clients", "7"]
    assert main(["analyze", "features", str(run_dir), "--out", str(tmp_path / "f"), *args]) == 2
    err = capsys.readouterr().err
    assert "--scarce-clients 7 x --scarce 100 = 700 training samples, but synthetic has 600" in err
    assert not (tmp_path / "f").exists()
