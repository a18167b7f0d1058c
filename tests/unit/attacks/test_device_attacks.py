"""``--device`` of ``fedaug attack ...`` and ``fedaug zsdg``: refused before any data or output when this
machine lacks it; ``--device cpu`` runs; the device given wins over the run's recorded ``engine.device``;
checkpoints are loaded onto the device (``map_location``)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from fedaug.attacks.target import global_model, run_checkpoint, run_config
from fedaug.cli.main import main
from fedaug.data.datasets import load_dataset
from fedaug.runtime.device import tensor_devices

BAD_DEVICES = [
    pytest.param("gpu", id="gpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device"),
    ),
]


def _argv(command: str, run_dir: Path, out: Path) -> list[str]:
    if command == "zsdg":
        return ["zsdg", str(run_dir), "--iterations", "1", "--out", str(out)]
    if command == "invert":
        return ["attack", "invert", "--iterations", "1", "--out", str(out)]
    return ["attack", command, str(run_dir), "--out", str(out)]


@pytest.mark.parametrize("device", BAD_DEVICES)
@pytest.mark.parametrize("command", ["reconstruct", "context", "invert", "zsdg"])
def test_a_device_this_machine_lacks_is_refused_before_data_or_output(
    command: str,
    device: str,
    bn_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Prepare: loading any dataset is recorded
    loaded: list[str] = []
    # (fedaug.cli.zsdg imports it when its command runs, so it is caught at the source)
    for where in ("fedaug.attacks.target", "fedaug.attacks.invert", "fedaug.data.datasets"):
        monkeypatch.setattr(f"{where}.load_dataset", lambda name, **_: loaded.append(name))
    out = tmp_path / "out"
    # Execute
    code = main([*_argv(command, bn_run, out), "--device", device])
    # Assert: one line naming the value and the devices this machine has
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("fedaug: error: --device=") and f"'{device}'" in err[0]
    assert re.search(r"(available|this machine has): cpu\b", err[0]), err[0]
    assert not out.exists() and loaded == []


def test_zsdg_on_the_cpu_equals_the_default_and_records_the_device(bn_run: Path, tmp_path: Path) -> None:
    # Execute
    base = ["zsdg", str(bn_run), "--per-class", "2", "--iterations", "3", "--save-samples"]
    assert main([*base, "--out", str(tmp_path / "auto")]) == 0
    assert main([*base, "--out", str(tmp_path / "cpu"), "--device", "cpu"]) == 0
    # Assert
    auto, cpu = (json.loads((tmp_path / d / "zsdg.json").read_text()) for d in ("auto", "cpu"))
    assert cpu["device"] == "cpu"
    if not torch.cuda.is_available():  # auto is the CPU here: the same numbers
        assert auto == cpu
        a, c = (torch.load(tmp_path / d / "zsdg_samples.pt", weights_only=True) for d in ("auto", "cpu"))
        assert torch.equal(a["x"], c["x"]) and torch.equal(a["y"], c["y"])


def test_the_device_given_wins_over_the_runs_recorded_one(bn_run: Path, tmp_path: Path) -> None:
    """A run trained on a GPU (config.yaml says engine.device: cuda) is attacked with --device cpu."""
    # Prepare: a copy of the run whose config recorded a GPU
    gpu_run = tmp_path / "gpu_run"
    shutil.copytree(bn_run, gpu_run)
    config = yaml.safe_load((gpu_run / "config.yaml").read_text())
    config.setdefault("engine", {})["device"] = "cuda"
    (gpu_run / "config.yaml").write_text(yaml.safe_dump(config))
    # Execute
    argv = ["zsdg", str(gpu_run), "--per-class", "2", "--iterations", "1", "--out", str(tmp_path / "z")]
    code = main([*argv, "--device", "cpu"])
    # Assert
    assert code == 0
    assert run_config(gpu_run).engine.device == "cuda"  # as recorded
    assert run_config(gpu_run, torch.device("cpu")).engine.device == "cpu"  # what the attack builds
    assert json.loads((tmp_path / "z" / "zsdg.json").read_text())["device"] == "cpu"


def test_the_checkpoint_and_the_model_land_on_the_device(bn_run: Path) -> None:
    """``map_location``: the checkpoint's tensors go straight to the attack's device (``meta`` stands in for
    a device other than the one the run saved from)."""
    # Execute
    meta = torch.device("meta")
    ckpt = run_checkpoint(bn_run, None, meta)
    config = run_config(bn_run)
    dataset = load_dataset(config.data.name, data_dir=config.data.data_dir, **config.data.options)
    model, _, round_num = global_model(ckpt, config, dataset, meta)
    # Assert
    assert tensor_devices(ckpt["state"]["model_state"]) == {meta}
    assert tensor_devices(model) == {meta} and round_num == 2
    assert tensor_devices(run_checkpoint(bn_run, None)["state"]) == {torch.device("cpu")}


def test_reconstruct_with_device_cpu_records_it(tiny_runs: dict[str, Path], tmp_path: Path) -> None:
    # Execute
    argv = ["attack", "reconstruct", str(tiny_runs["flea"]), str(tiny_runs["fedmix"]), "--out", str(tmp_path)]
    assert main([*argv, "--epochs", "1", "--decoders", "linear", "--eval-size", "40", "--device", "cpu"]) == 0
    # Assert
    report = json.loads((tmp_path / "reconstruct.json").read_text())
    assert report["device"] == "cpu"
    assert {r["target"] for r in report["rows"]} == {"flea (smoke) r2", "fedmix (smoke) r1"}


# --- on a GPU (skipped without one) ---------------------------------------------------------------------

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@CUDA
def test_zsdg_on_cuda_writes_cpu_samples(bn_run: Path, tmp_path: Path) -> None:
    # Execute
    base = ["zsdg", str(bn_run), "--per-class", "2", "--iterations", "3", "--save-samples"]
    assert main([*base, "--out", str(tmp_path / "cuda"), "--device", "cuda"]) == 0
    # Assert
    result = json.loads((tmp_path / "cuda" / "zsdg.json").read_text())
    assert result["device"].startswith("cuda:")
    assert all(0.0 <= row["model_acc_on_samples"] <= 1.0 for row in result["per_class"])
    saved = torch.load(tmp_path / "cuda" / "zsdg_samples.pt", weights_only=True)  # no map_location needed
    assert tensor_devices(saved) == {torch.device("cpu")} and saved["x"].shape == (6, 1, 28, 28)


@CUDA
def test_attacks_on_cuda_pick_the_same_images_as_on_the_cpu(
    tiny_runs: dict[str, Path], tmp_path: Path
) -> None:
    # Execute
    targets = [str(tiny_runs[m]) for m in ("flea", "fedmix", "feddata")]
    options = ["--epochs", "1", "--decoders", "linear", "--eval-size", "40"]
    reports = {}
    for device in ("cpu", "cuda"):
        out = tmp_path / device
        assert main(["attack", "reconstruct", *targets, "--out", str(out), *options, "--device", device]) == 0
        reports[device] = json.loads((out / "reconstruct.json").read_text())
        argv = [
            "attack",
            "context",
            *targets[:2],
            "--out",
            str(out / "ctx"),
            "--sizes",
            "20",
            "--repeats",
            "1",
        ]
        assert (
            main([*argv, "--eval-size", "20", "--min-steps", "5", "--marker-size", "3", "--device", device])
            == 0
        )
    # Assert: the same rows; FedMix's averages and FedData's inputs (no training) agree to float rounding
    cpu, cuda = ({(r["target"], r["attacker"]): r for r in reports[d]["rows"]} for d in ("cpu", "cuda"))
    assert cpu.keys() == cuda.keys() and reports["cuda"]["device"].startswith("cuda:")
    for key, row in cpu.items():
        if row["shared"] != "features":
            assert cuda[key]["mse"] == pytest.approx(row["mse"], rel=1e-4, abs=1e-7), key
        assert cuda[key]["baseline_mse"] == pytest.approx(row["baseline_mse"], rel=1e-4), key
