"""engine.batched_clients=padded wired into the engine: whole float64 runs equal the sequential loop for every
covered method (clients of 20, 13, 9 and 3 samples, BatchNorm), uncovered hooks train one by one with the
reason logged once, one padded step serves every round of a shape, and the config value is checked."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fedaug import registry
from fedaug.api import ClientContext, Payload
from fedaug.config.load import load_config
from fedaug.config.schema import BATCHED_CLIENTS_MODES, EngineConfig
from fedaug.engine.batched import padded
from fedaug.engine.batched.modes import BATCHED_MODES
from fedaug.engine.simulation import Simulation
from fedaug.errors import ConfigError
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.flea.method import FLea, FLeaConfig
from fedaug.models.base import FlattenPool, SplitModel
from fedaug.runs import resolve
from fedaug.training.loop import BatchableLoss, LossFn, cross_entropy_loss
from tests.conftest import SMOKE, make_spec
from tests.unit.engine.helpers import assert_same_run, bn_mlp_float64
from tests.unit.replay_check import OpLog, _first_difference

SIZES = [20, 13, 9, 3]  # batch 8: (8, 8, 4), (8, 5), (9,) and (3,) per epoch


def _spec(run_dir: Path, method: FedAvg, model_fn: Any = bn_mlp_float64, mode: bool | str = False) -> Any:
    """Three float64 rounds of the four unequal clients, all of them in every round."""
    spec = make_spec(
        run_dir, method=method, num_clients=4, rounds=3, per_round=4, samples_per_client=20, model_fn=model_fn
    )
    indices = [torch.arange(c, 80, 4)[:n] for c, n in enumerate(SIZES)]
    run = replace(spec.run, client_sizes=tuple(SIZES))
    return replace(
        spec,
        train_x=spec.train_x.double(),
        test_x=spec.test_x.double(),
        client_indices=indices,
        run=run,
        batched_clients=mode,
    )


def _bn_head_float64() -> SplitModel:
    """Two BatchNorm blocks: split at layer 0 (FLea's), the head has a training-mode BatchNorm."""
    first = nn.Sequential(nn.Linear(8, 16, bias=False), nn.BatchNorm1d(16), nn.ReLU())
    second = nn.Sequential(nn.Linear(16, 12, bias=False), nn.BatchNorm1d(12), nn.ReLU())
    return SplitModel([first, second], FlattenPool(), nn.Linear(12, 3)).double()


def _fused_flea(**options: Any) -> FLea:
    method = FLea(FLeaConfig(split_layer=0, **options))
    method.head_passes = "fused"  # per-part BatchNorm statistics: refused under a row mask, separate run
    return method


COVERED: dict[str, Any] = {
    "fedavg": lambda: FedAvg(),
    "fedprox": lambda: registry.get("method", "fedprox")(),
    "feddecorr": lambda: registry.get("method", "feddecorr")(),  # standardised over the real rows
    "fedlc": lambda: registry.get("method", "fedlc")(),
    "fedrs": lambda: registry.get("method", "fedrs")(),
    "fedntd": lambda: registry.get("method", "fedntd")(),
    "moon": lambda: registry.get("method", "moon")(),  # clients keep their previous model between rounds
    "fedmix": lambda: registry.get("method", "fedmix")(),  # NaiveMix: a batch transform, soft labels
    "feddata": lambda: registry.get("method", "feddata")(),  # plain CE on local data and the shared pool
    "ccvr": lambda: registry.get("method", "ccvr")(),
    "fedzdas": lambda: registry.get("method", "fedzdas")(),
    "flea_eq6": lambda: registry.get("method", "flea_eq6")(),
    "flea": lambda: registry.get("method", "flea")(),
    "flea_official": lambda: registry.get("method", "flea_official")(),  # official warm-up: KL, 3x epochs
    "flea_trace": lambda: FLea(FLeaConfig(decor_form="trace")),
    "flea_dcor_squared_fused_bn_head": lambda: _fused_flea(decor_form="dcor_squared"),
}


@pytest.mark.parametrize("name", list(COVERED))
def test_padded_runs_equal_the_sequential_runs_in_float64(
    tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    model_fn = _bn_head_float64 if "bn_head" in name else bn_mlp_float64
    Simulation(_spec(tmp_path / "seq", COVERED[name](), model_fn)).run()
    with caplog.at_level(logging.WARNING):
        Simulation(_spec(tmp_path / "pad", COVERED[name](), model_fn, "padded")).run()
    assert "one by one" not in caplog.text  # every round trained padded
    assert_same_run(tmp_path / "seq", tmp_path / "pad")


def test_one_padded_step_serves_every_round_of_a_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # FedAvg's hook is one function: built in round 1, loaded with each round's weights after. FLea: round 1's
    # warm-up hook, then the mixing hook of round 2, which serves round 3 by its rounds_key.
    built: list[str] = []
    init = padded.PaddedStep.__init__

    def counting(self: padded.PaddedStep, *args: Any, **kwargs: Any) -> None:
        built.append(args[1].fn.__name__)
        init(self, *args, **kwargs)

    monkeypatch.setattr(padded.PaddedStep, "__init__", counting)
    Simulation(_spec(tmp_path / "fedavg", FedAvg(), mode="padded")).run()
    assert built == ["_plain_cross_entropy"]
    built.clear()
    Simulation(_spec(tmp_path / "flea", registry.get("method", "flea")(), mode="padded")).run()
    assert built == ["loss_fn", "loss_fn"]


class _UnmaskedFedAvg(FedAvg):
    """FedAvg's objective in a hook that does not declare its batch means masked."""

    def loss_fn(self, payload: Payload, ctx: ClientContext) -> LossFn:
        return BatchableLoss(lambda model, x, y, client, step: cross_entropy_loss(model, x, y))


def test_uncovered_hooks_train_one_by_one_with_the_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    Simulation(_spec(tmp_path / "seq", _UnmaskedFedAvg())).run()
    with caplog.at_level(logging.WARNING):
        Simulation(_spec(tmp_path / "pad", _UnmaskedFedAvg(), mode="padded")).run()
    reason = (
        "training clients one by one (client 0: padded batches train loss hooks whose batch means are masked"
    )
    assert caplog.text.count(reason) == 1
    assert (tmp_path / "pad" / "metrics.jsonl").read_text() == (
        tmp_path / "seq" / "metrics.jsonl"
    ).read_text()


def test_every_batched_value_has_a_mode() -> None:
    assert set(BATCHED_MODES) == {v for v in BATCHED_CLIENTS_MODES if v is not False}


def test_engine_batched_clients_accepts_false_true_padded_only(tmp_path: Path) -> None:
    config = load_config([SMOKE], [f"out_dir={tmp_path}", "engine.batched_clients=padded"])
    assert config.engine.batched_clients == "padded"
    with pytest.raises(
        ConfigError, match=r"^engine.batched_clients must be one of False, True, padded, got 'pad'$"
    ):
        load_config([SMOKE], [f"out_dir={tmp_path}", "engine.batched_clients=pad"])


def test_the_cli_refuses_a_bad_value_with_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedaug.cli.main import main

    code = main(
        ["run", str(SMOKE), "--set", "engine.batched_clients=sometimes", "--out-dir", str(tmp_path / "o")]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.splitlines() == [err] and "one of False, True, padded, got 'sometimes'" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("batched", "value", "on"),
    [("padded", "auto", True), (True, "auto", False), ("padded", False, False), (False, "auto", True)],
)
def test_padded_rounds_record_graphs_by_default_on_a_gpu(
    batched: bool | str, value: bool | str, on: bool
) -> None:
    engine = EngineConfig(cuda_graphs=value, batched_clients=batched)
    assert resolve.cuda_graphs_on(engine, torch.device("cuda")) is on


@pytest.mark.parametrize("name", ["fedavg", "flea", "moon"])
def test_every_padded_step_would_replay_its_recording(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a CUDA graph needs of each kept step, checked on the CPU (tests/unit/replay_check.py): every call
    # issues the same operations on the same memory with the same scalars as the one a GPU records (its
    # first call allocates the outputs: a warm-up there), with no host read, random draw or host tensor.
    logs: dict[int, list[OpLog]] = {}
    alive: list[padded.PaddedStep] = []  # a step the engine drops must not lend its id() to a later one
    run = padded.PaddedStep.run

    def logged(self: padded.PaddedStep) -> None:
        log = OpLog()
        with log:
            run(self)
        if id(self) not in logs:
            alive.append(self)
        logs.setdefault(id(self), []).append(log)

    monkeypatch.setattr(padded.PaddedStep, "run", logged)
    Simulation(_spec(tmp_path, COVERED[name](), mode="padded")).run()
    assert logs and all(len(calls) >= 3 for calls in logs.values())  # a round is at least 3 steps
    for calls in logs.values():
        for call in calls[2:]:
            assert _first_difference(calls[1], call) is None
