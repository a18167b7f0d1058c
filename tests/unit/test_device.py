"""``engine.device``: resolution and its errors, moving state, env.json facts, the CLI's refusal, resume."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from fedaug.cli.main import main
from fedaug.config.identity import run_dir_for
from fedaug.config.load import load_config
from fedaug.engine.checkpoint import RunStore
from fedaug.errors import ConfigError
from fedaug.runs.runner import run_experiment
from fedaug.runtime.device import (
    DeviceError,
    check_device_name,
    default_eval_batch_size,
    device_facts,
    device_label,
    resolve_device,
    tensor_devices,
    to_device,
)
from tests.conftest import SMOKE


@pytest.fixture
def one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretends this machine has one CUDA device (resolution only; nothing runs on it)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def test_auto_and_cpu_resolve_to_the_cpu_without_a_gpu() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device(None) == torch.device("cpu")
    assert resolve_device("CPU") == torch.device("cpu")


@pytest.mark.usefixtures("one_gpu")
def test_cuda_names_resolve_to_an_indexed_device_on_a_gpu_machine() -> None:
    assert resolve_device("auto") == torch.device("cuda", 0)
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    with pytest.raises(DeviceError, match=r"engine.device='cuda:7' but this machine has: cpu, cuda:0$"):
        resolve_device("cuda:7")


def test_cuda_on_a_machine_without_one_names_what_is_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(
        DeviceError, match=r"engine.device='cuda' but this machine has no CUDA .*available: cpu"
    ):
        resolve_device("cuda")
    with pytest.raises(DeviceError, match=r"--device='cuda:1' but .*available: cpu"):
        resolve_device("cuda:1", key="--device")


@pytest.mark.parametrize("name", ["gpu", "cuda:x", "cuda:", "mps", "", "cpu:1"])
def test_a_typo_is_refused_with_the_valid_choices(name: str) -> None:
    expected = r"valid choices: auto, cpu, cuda, cuda:N \(this machine has: cpu"
    with pytest.raises(DeviceError, match=expected):
        check_device_name(name)
    with pytest.raises(DeviceError, match=expected):
        resolve_device(name)


def test_config_refuses_a_misspelled_device_when_loaded() -> None:
    with pytest.raises(DeviceError, match=r"engine\.device='gpu'"):
        load_config([SMOKE], ["engine.device=gpu"])
    assert load_config([SMOKE], ["engine.device=cuda:3"]).engine.device == "cuda:3"  # checked at run time


@dataclass
class _State:
    weights: dict[str, torch.Tensor]
    pool: list[torch.Tensor]
    count: int


def test_to_device_moves_every_nested_tensor_and_keeps_the_rest() -> None:
    state = _State({"w": torch.ones(2)}, [torch.zeros(1), torch.arange(3)], 4)
    moved = to_device({"s": state, "t": (torch.ones(1), "x")}, "meta")
    assert tensor_devices(moved) == {torch.device("meta")}
    assert moved["s"].count == 4 and moved["t"][1] == "x"
    assert tensor_devices(state) == {torch.device("cpu")}  # the original is untouched
    same = torch.ones(2)
    assert to_device(same, "cpu") is same  # already there: no copy


def test_checkpoint_loads_onto_the_requested_device(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.prepare()
    store.save_checkpoint({"state": {"model_state": {"w": torch.ones(3)}}, "round_num": 1})
    ckpt = store.load_checkpoint(map_location="meta")
    assert ckpt is not None
    assert tensor_devices(ckpt) == {torch.device("meta")}


def test_device_facts_and_labels() -> None:
    assert device_facts(torch.device("cpu")) == {"device": "cpu"}
    assert device_label({}) == "cpu"  # env.json from before devices were recorded
    assert device_label({"device": "cuda:0", "gpu_name": "NVIDIA H200"}) == "NVIDIA H200"


@pytest.mark.parametrize(
    "argv", [["--device", "cuda"], ["--device", "gpu"], ["--set", "engine.device=cuda:7"]]
)
def test_cli_refuses_a_missing_device_before_making_a_run_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code = main(["run", str(SMOKE), "--out-dir", str(tmp_path / "runs"), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "cpu" in err and "engine.device=" in err
    assert not (tmp_path / "runs").exists()


def _two_seed_sweep(tmp_path: Path) -> list[str]:
    """``fedaug sweep`` of the smoke preset over seeds 0 and 1 into ``tmp_path/runs``, on a machine without a
    GPU (skips the test on one with)."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"extends: {SMOKE}\ngrid:\n  seed: [0, 1]\n")
    return ["sweep", str(sweep), "--out-dir", str(tmp_path / "runs")]


def test_sweep_refuses_a_missing_device_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*_two_seed_sweep(tmp_path), "--device", "cuda"])
    assert code == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_sweep_dry_run_lists_the_plan_and_notes_a_missing_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*_two_seed_sweep(tmp_path), "--dry-run"]
    assert main([*argv, "--device", "cuda"]) == 0  # a plan for a GPU machine, written on this one
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:2]] == ["new", "new"]
    assert lines[-1].startswith("note: this machine could not run them: engine.device='cuda'")
    assert "no CUDA device" in lines[-1]
    assert main([*argv, "--device", "cpu"]) == 0
    assert "note:" not in capsys.readouterr().out
    assert not (tmp_path / "runs").exists()


def test_env_json_records_the_device_and_a_resume_on_another_device_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = load_config([SMOKE], [f"out_dir={tmp_path}", "engine.device=cpu", "train.rounds=2"])
    run_experiment(config)
    env_path = run_dir_for(config) / "env.json"
    env = json.loads(env_path.read_text())
    assert env["device"] == "cpu" and env["deterministic"] is False
    # The same run dir, as if its first rounds had run on a GPU: resuming on the CPU warns (not refused).
    env.update({"device": "cuda:0", "gpu_name": "NVIDIA H200"})
    env_path.write_text(json.dumps(env))
    (run_dir_for(config) / "summary.json").unlink()
    longer = load_config([SMOKE], [f"out_dir={tmp_path}", "engine.device=cpu", "train.rounds=2"])
    with caplog.at_level(logging.WARNING):
        run_experiment(longer)
    assert "ran on NVIDIA H200 and resumes on cpu" in caplog.text


def test_eval_batch_size_defaults_to_the_device_and_an_explicit_one_wins(tmp_path: Path) -> None:
    from fedaug.runs.runner import prepare

    assert default_eval_batch_size(torch.device("cpu")) == 1024
    assert default_eval_batch_size(torch.device("cuda", 0)) == 8192
    config = load_config([SMOKE], [f"out_dir={tmp_path}", "engine.device=cpu"])
    assert config.engine.eval_batch_size is None
    assert prepare(config, tmp_path).spec.eval_batch_size == 1024
    config = load_config([SMOKE], [f"out_dir={tmp_path}", "engine.eval_batch_size=64"])
    assert prepare(config, tmp_path).spec.eval_batch_size == 64
    with pytest.raises(ConfigError, match=r"engine\.eval_batch_size must be >= 1, got 0"):
        load_config([SMOKE], ["engine.eval_batch_size=0"])


def test_the_cpu_eval_batch_size_follows_the_models_measurement() -> None:
    # bn_cnn_cifar: batch 256 measured faster than 1024 (benchmarks/results/eval_batch_bn_cnn_cifar_cpu.json)
    assert default_eval_batch_size(torch.device("cpu"), "bn_cnn_cifar") == 256
    assert default_eval_batch_size(torch.device("cuda", 0), "bn_cnn_cifar") == 8192
    assert default_eval_batch_size(torch.device("cpu"), "audionet") == 32
    assert default_eval_batch_size(torch.device("cpu"), "lenet5") == 1024
    assert default_eval_batch_size(torch.device("cpu"), None) == 1024


def test_a_cifar_bn_cnn_run_on_the_cpu_gets_its_measured_defaults(tmp_path: Path) -> None:
    from fedaug.runs.runner import prepare

    shape = ["data.shape=[3, 32, 32]", "data.num_classes=10", "model.name=bn_cnn_cifar", "engine.device=cpu"]
    spec = prepare(load_config([SMOKE], [f"out_dir={tmp_path}", *shape]), tmp_path).spec
    assert (spec.eval_batch_size, spec.channels_last) == (256, "all")
    explicit = [f"out_dir={tmp_path}", *shape, "engine.eval_batch_size=1024", "engine.channels_last=eval"]
    spec = prepare(load_config([SMOKE], explicit), tmp_path).spec
    assert (spec.eval_batch_size, spec.channels_last) == (1024, "eval")


@pytest.mark.parametrize(("name", "shape"), [("bn_cnn_cifar", (3, 32, 32)), ("audionet", (2, 16, 32))])
def test_the_measured_cpu_eval_batch_changes_no_prediction(name: str, shape: tuple[int, ...]) -> None:
    from fedaug.engine.evaluation import evaluate
    from fedaug.models import build_model

    torch.manual_seed(0)
    model = build_model(name, num_classes=10, input_shape=shape).eval()
    x = torch.randn(96, *shape, generator=torch.Generator().manual_seed(1))
    y = torch.arange(96) % 10
    measured = default_eval_batch_size(torch.device("cpu"), name)
    small, large = (evaluate(model, x, y, num_classes=10, batch_size=b) for b in (measured, 1024))
    assert small["acc"] == large["acc"] and small["class_acc_var"] == large["class_acc_var"]
    assert small["loss"] == pytest.approx(large["loss"], rel=1e-6)
