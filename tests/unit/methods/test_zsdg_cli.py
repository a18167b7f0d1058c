"""`fedaug zsdg`: samples of every class from a run's global model, a figure and the numbers per class."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fedaug.cli.main import main
from fedaug.config.identity import run_dir_for
from fedaug.config.load import load_config
from fedaug.runs.runner import run_experiment
from tests.conftest import SMOKE


def test_samples_figure_and_numbers_per_class(bn_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "zsdg"
    args = ["zsdg", str(bn_run), "--per-class", "2", "--iterations", "3", "--out", str(out), "--save-samples"]
    assert main(args) == 0
    assert {p.name for p in out.iterdir()} == {
        "zsdg_samples.png",
        "zsdg.json",
        "zsdg_samples.pt",
    }
    result = json.loads((out / "zsdg.json").read_text())
    assert (result["round"], result["method"]) == (2, "fedavg")
    assert [row["class"] for row in result["per_class"]] == [0, 1, 2]
    assert all(0.0 <= row["model_acc_on_samples"] <= 1.0 for row in result["per_class"])
    assert result["settings"]["iterations"] == 3 and result["settings"]["lr"] == 0.05  # ZSDG's default lr
    saved = torch.load(out / "zsdg_samples.pt", weights_only=True)
    assert saved["x"].shape == (6, 1, 28, 28) and saved["y"].tolist() == [0, 0, 1, 1, 2, 2]


def test_a_round_without_a_kept_checkpoint_is_refused_before_the_dataset_loads(
    bn_run: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded: list[str] = []
    monkeypatch.setattr("fedaug.data.datasets.load_dataset", lambda name, **_: loaded.append(name))
    assert main(["zsdg", f"{bn_run}@1", "--iterations", "1"]) == 2
    assert "has no checkpoint for round 1 (kept rounds: none; keep more with" in capsys.readouterr().err
    assert loaded == []  # a paper-scale dataset is not loaded only to be refused


def test_a_model_without_batch_norm_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = load_config([SMOKE], ["train.rounds=1", f"out_dir={tmp_path}", "engine.progress=false"])  # MLP
    run_experiment(config)
    assert main(["zsdg", str(run_dir_for(config)), "--iterations", "1", "--out", str(tmp_path / "z")]) == 2
    assert "needs BatchNorm layers with running statistics" in capsys.readouterr().err


def test_a_fed_zda_run_generates_with_its_own_settings() -> None:
    from fedaug.cli.zsdg import zsdg_settings
    from fedaug.methods.fedavg import FedAvg
    from fedaug.methods.fedzda.method import FedZDAC, ZDAConfig
    from fedaug.methods.fedzda.zsdg import ZSDGSettings

    zdac = FedZDAC(ZDAConfig(gen_lr=0.1, gen_iterations=7, gen_bn_norm="squared"))
    assert zsdg_settings(zdac, None, None) == ZSDGSettings(iterations=7, lr=0.1, bn_norm="squared")
    assert zsdg_settings(zdac, 3, None) == ZSDGSettings(iterations=3, lr=0.1, bn_norm="squared")
    assert zsdg_settings(FedAvg(), None, 0.2) == ZSDGSettings(lr=0.2)
