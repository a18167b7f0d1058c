"""An lr that overflows in the first local step (issue 68): refused before the run dir is made, in one line
naming ``train.lr`` and the optimizer, by one step of plain cross-entropy on two training samples
(:func:`fedaug.runs.resolve.check_first_step`), as a model that does not fit the data is; in a sweep the
point fails with that line and leaves no run dir, and the other points run.

Before: the run failed at round 1, client 0, local step 2 with a FloatingPointError and left its run dir
(config.yaml, env.json, identity.json, empty logs).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from fedaug.api import TrainSettings
from fedaug.cli.main import main
from fedaug.config.load import load_config
from fedaug.errors import ConfigError
from fedaug.runs.resolve import check_first_step, resolve_components
from fedaug.training.loop import first_step_problem
from tests.conftest import REPO_ROOT

SMOKE = str(REPO_ROOT / "configs" / "smoke.yaml")


def _linear(weight: float) -> nn.Module:
    """One input, two logits: ``[w x, 0]``, so the gradient and the step are known by hand."""
    model = nn.Linear(1, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[weight], [0.0]]))
    return model


def _sgd(lr: float) -> TrainSettings:
    return TrainSettings(lr=lr, optimizer="sgd")


X, Y = torch.tensor([[1.0]]), torch.tensor([1])


def test_a_step_that_stays_finite_is_no_problem_and_is_the_step_sgd_takes() -> None:
    # Prepare: CE of logits [w, 0] against class 1 has d/dw = softmax(w) = 1/2 at w = 0
    model = _linear(0.0)
    # Execute
    problem = first_step_problem(model, X, Y, _sgd(0.1))
    # Assert: the model took the step (the probe works in place on what it is given)
    assert problem is None
    assert model.weight[0, 0].item() == pytest.approx(-0.05)


def test_a_parameter_beyond_float32_after_the_step_is_named() -> None:
    # an input of 1e30: d/dw = 1e30 / 2, so w - lr * 5e29 with lr = 1e10 is -5e39, beyond float32: -inf
    assert first_step_problem(_linear(0.0), X * 1e30, Y, _sgd(1e10)) == (
        "the first step makes parameter 'weight' non-finite"
    )


def test_a_loss_that_overflows_after_the_step_is_named() -> None:
    # Prepare: two layers: the step makes both weights about -1e30 * 1/2, finite, but their product overflows
    model = nn.Sequential(nn.Linear(1, 1, bias=False), nn.Linear(1, 2, bias=False))
    with torch.no_grad():
        model[0].weight.fill_(1.0)
        model[1].weight.copy_(torch.tensor([[1.0], [0.0]]))
    # Execute
    problem = first_step_problem(model, X, Y, _sgd(1e30))
    # Assert
    assert problem is not None and problem.startswith("the loss after the first step is ")
    assert not math.isfinite(float(problem.rsplit(" ", 1)[1]))


def test_a_model_without_trainable_parameters_has_no_step_to_check() -> None:
    model = _linear(0.0).requires_grad_(False)
    assert first_step_problem(model, X, Y, _sgd(1e39)) is None


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (
            ["train.lr=1e30"],
            "train.lr=1e+30 (train.optimizer=adam) overflows model 'mlp' on dataset 'synthetic' in one step: "
            "the loss after the first step is nan; lower train.lr",
        ),
        (["train.lr=1e30", "train.optimizer=sgd"], "train.lr=1e+30 (train.optimizer=sgd) overflows model"),
    ],
)
def test_the_engines_resolve_step_refuses_an_overflowing_lr(sets: list[str], expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        resolve_components(load_config([SMOKE], sets))
    assert str(error.value).startswith(expected), str(error.value)


@pytest.mark.parametrize("lr", ["1e-3", "0.1", "1"])
def test_lrs_that_train_pass_and_the_check_draws_nothing_from_the_global_generator(lr: str) -> None:
    # Prepare: a model with dropout, which draws from the global generator in training mode
    config = load_config([SMOKE], [f"train.lr={lr}"])
    parts = resolve_components(config)  # the check passed inside
    model = nn.Sequential(nn.Dropout(0.5), parts.model_fn())
    before = [p.detach().clone() for p in model.parameters()]
    torch.manual_seed(3)
    expected = torch.rand(3)
    torch.manual_seed(3)
    # Execute
    check_first_step(model, config, parts.dataset)
    # Assert: the generator and the model are as they were
    assert torch.equal(torch.rand(3), expected)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_sweep_point_with_an_overflowing_lr_fails_in_one_line_without_a_run_dir(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        f"extends: {SMOKE}\nname: sw\ntrain: {{rounds: 1}}\ngrid: {{train.lr: [0.001, 1.0e+30]}}\n"
    )
    out = tmp_path / "runs"
    # Execute
    code = main(["sweep", str(grid), "--out-dir", str(out)])
    # Assert: the good point ran, the bad one failed naming its lr, and made no run dir
    assert code == 1
    failed = [r for r in caplog.records if "FAILED" in r.getMessage()]
    assert len(failed) == 1
    assert (
        "ConfigError: train.lr=1e+30 (train.optimizer=adam) overflows model 'mlp'" in failed[0].getMessage()
    )
    made = sorted(p.parents[3].name for p in out.rglob("config.yaml"))
    assert made == ["train.lr=0.001"]


def test_a_run_that_diverges_before_its_first_checkpoint_removes_the_run_dir_it_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare: an lr whose first step stays finite (the check passes) but whose third step does not
    out = tmp_path / "runs"
    argv = ["run", SMOKE, "--out-dir", str(out), "--set", "train.lr=1e10", "--set", "train.optimizer=sgd"]
    # Execute
    code = main(argv)
    # Assert: one line naming the step and the lr, and nothing left (the out dir was made by this run too)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "FloatingPointError: non-finite training loss (nan) at local step 3" in err[0]
    assert err[0].endswith(
        "(train.lr=1e+10, train.optimizer=sgd); it stopped before its first checkpoint, so the run dir it "
        "made was removed"
    ), err[0]
    assert not out.exists()


def test_a_run_that_diverges_after_a_checkpoint_keeps_its_run_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: the fourth client's training (round 2; the smoke run trains 3 clients a round) diverges
    import fedaug.training.loop as loop

    calls = []
    real = loop.check_finite_values

    def diverging(losses: list[float]) -> None:
        calls.append(1)
        real([math.nan] if len(calls) == 4 else losses)

    monkeypatch.setattr(loop, "check_finite_values", diverging)
    out = tmp_path / "runs"
    # Execute
    code = main(["run", SMOKE, "--out-dir", str(out)])
    # Assert: the error is the engine's, and round 1's checkpoint is there to resume from
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("fedaug: error: round 2, client "), err
    assert "run dir it made was removed" not in err
    assert len(list(out.rglob("ckpt/latest.pt"))) == 1
