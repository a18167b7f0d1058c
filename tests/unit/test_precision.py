"""engine.precision: bf16 autocast runs close to float32; float32 is untouched; bad values fail."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

import fedaug.runtime.precision as precision_module
from fedaug.api import ClientData, TrainSettings
from fedaug.config.load import dump_yaml, load_config
from fedaug.config.schema import EngineConfig, ExperimentConfig
from fedaug.engine.evaluation import evaluate
from fedaug.engine.simulation import Simulation
from fedaug.errors import ConfigError
from fedaug.models import build_model
from fedaug.runs.resume import check_existing
from fedaug.runs.runner import run_experiment
from fedaug.runtime.precision import autocast, bf16_warning, flush_denormals
from fedaug.training.loop import cross_entropy_loss, snapshot_state, train_local
from tests.conftest import REPO_ROOT, make_spec


def _tiny_cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model("bn_cnn_mnist", num_classes=3, input_shape=(1, 8, 8))


def _data() -> ClientData:
    gen = torch.Generator().manual_seed(1)
    y = torch.arange(40) % 3
    x = torch.randn(40, 1, 8, 8, generator=gen) + y.view(-1, 1, 1, 1).float()
    return ClientData(0, x, y, 3)


def _train(precision: str) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    model = _tiny_cnn()
    settings = TrainSettings(local_epochs=2, batch_size=8, lr=1e-3, precision=precision)
    metrics = train_local(
        model,
        _data(),
        loss_fn=cross_entropy_loss,
        settings=settings,
        generator=torch.Generator().manual_seed(0),
    )
    return snapshot_state(model), metrics


def test_bf16_training_keeps_float32_weights_and_differs_only_slightly() -> None:
    fp32, fp32_metrics = _train("float32")
    bf16, bf16_metrics = _train("bf16")
    start = snapshot_state(_tiny_cnn())
    assert all(value.dtype == start[key].dtype for key, value in bf16.items())  # master weights stay fp32
    moved = max(float((fp32[k].float() - start[k].float()).abs().max()) for k in start)
    gap = max(float((fp32[k].float() - bf16[k].float()).abs().max()) for k in start)
    assert gap > 0  # bf16 really ran
    assert gap < 0.1 * moved  # ... and stayed close: the bf16 drift is a small fraction of the update
    assert bf16_metrics["train/loss"] == pytest.approx(fp32_metrics["train/loss"], rel=0.02)
    assert bf16_metrics["train/steps"] == fp32_metrics["train/steps"] == 10.0


def test_bf16_evaluation_returns_float32_loss_close_to_float32() -> None:
    model, data = _tiny_cnn(), _data()
    fp32 = evaluate(model, data.x, data.y, num_classes=3, batch_size=16)
    bf16 = evaluate(model, data.x, data.y, num_classes=3, batch_size=16, precision="bf16")
    assert bf16["loss"] == pytest.approx(fp32["loss"], rel=0.02)
    assert abs(bf16["acc"] - fp32["acc"]) <= 2 / 40  # at most two borderline samples flip


def test_autocast_gives_float32_logits_and_removes_its_hook() -> None:
    model = _tiny_cnn()
    x = _data().x[:4]
    with autocast(model, "bf16"):
        assert model(x).dtype == torch.float32  # the classifier hook casts the logits back
        assert model.encode(x, 0).dtype == torch.bfloat16  # features inside run in bf16
    assert not model.classifier._forward_hooks
    with autocast(model, "float32"):
        assert not torch.is_autocast_enabled("cpu")


def test_simulation_bf16_runs_and_float32_default_is_unchanged(tmp_path: Path) -> None:
    base = make_spec(tmp_path / "a", rounds=2, per_round=2)
    Simulation(base).run()
    Simulation(make_spec(tmp_path / "b", rounds=2, per_round=2)).run()
    bf16_spec = make_spec(tmp_path / "c", rounds=2, per_round=2)
    settings = bf16_spec.train_settings
    bf16_spec = replace(
        bf16_spec, precision="bf16", train_settings=lambda r: replace(settings(r), precision="bf16")
    )
    Simulation(bf16_spec).run()
    metrics = [(tmp_path / d / "metrics.jsonl").read_text() for d in ("a", "b", "c")]
    assert metrics[0] == metrics[1]
    assert metrics[2] != metrics[0]


def test_bad_precision_is_a_config_error_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match="float32, bf16"):
        EngineConfig(precision="fp16")
    with pytest.raises(ConfigError, match="float32, bf16"):
        _train("half")


def test_a_bf16_run_is_not_resumed_from_a_float32_run_dir(tmp_path: Path) -> None:
    fp32 = ExperimentConfig()
    (tmp_path / "config.yaml").write_text(dump_yaml(fp32))
    (tmp_path / "metrics.jsonl").write_text('{"round": 1}\n')  # the run has finished a round
    check_existing(tmp_path, replace(fp32, engine=EngineConfig(num_threads=1)))  # threads: same run
    with pytest.raises(ConfigError, match=r"engine\.precision"):
        check_existing(tmp_path, replace(fp32, engine=EngineConfig(precision="bf16")))


@pytest.mark.parametrize(
    ("precision", "native", "warns"),
    [("bf16", False, True), ("bf16", True, False), ("float32", False, False)],
)
def test_bf16_warns_only_without_native_bfloat16(
    monkeypatch: pytest.MonkeyPatch, precision: str, native: bool, warns: bool
) -> None:
    # Arrange: pretend the CPU has (or lacks) AVX-512 BF16 / AMX
    monkeypatch.setattr(precision_module, "native_bf16", lambda: native)
    # Act
    warning = bf16_warning(precision)
    # Assert: a warning that says why, only for bf16 without native support
    assert (warning is not None) == warns
    if warning is not None:
        assert "without native bfloat16" in warning and "slower than float32" in warning


def _subnormal_product() -> float:
    """1e-30 * 1e-10 = 1e-40: below float32's smallest normal (1.18e-38), so 0 when flushed."""
    return float(torch.tensor([1e-30]) * torch.tensor([1e-10]))


@pytest.mark.skipif(not torch.set_flush_denormal(False), reason="CPU without flush-to-zero (no SSE3)")
def test_flush_denormals_zeroes_subnormals_only_inside_and_only_when_enabled() -> None:
    assert _subnormal_product() == pytest.approx(1e-40, rel=1e-2, abs=0)
    with flush_denormals(False):
        assert _subnormal_product() == pytest.approx(1e-40, rel=1e-2, abs=0)
    with flush_denormals(True):
        assert _subnormal_product() == 0.0
        normal = float(torch.tensor([1e-20]) * torch.tensor([1e-10]))
        assert normal == pytest.approx(1e-30, rel=1e-6, abs=0)  # a normal number is kept
    assert _subnormal_product() == pytest.approx(1e-40, rel=1e-2, abs=0)


@pytest.mark.skipif(not torch.set_flush_denormal(False), reason="CPU without flush-to-zero (no SSE3)")
def test_a_run_with_flush_denormals_flushes_during_the_run_and_restores_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Arrange: record what a subnormal product gives at each evaluation of the run
    seen: list[float] = []
    real_evaluate = Simulation._evaluate

    def spy(self: Simulation, *args: object, **kwargs: object) -> object:
        seen.append(_subnormal_product())
        return real_evaluate(self, *args, **kwargs)

    monkeypatch.setattr(Simulation, "_evaluate", spy)
    sets = [f"out_dir={tmp_path}", "train.rounds=2", "engine.progress=false", "engine.flush_denormals=true"]
    # Act
    run_experiment(load_config([REPO_ROOT / "configs" / "smoke.yaml"], sets))
    # Assert: flushed inside the run, not after it
    assert seen == [0.0, 0.0]
    assert _subnormal_product() == pytest.approx(1e-40, rel=1e-2, abs=0)
