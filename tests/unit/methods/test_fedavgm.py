"""FedAvgM: momentum 0 with server lr 1 is FedAvg exactly; the momentum step by hand; BN statistics averaged;
exact resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedaug.api import ClientUpdate, RunContext
from fedaug.errors import ConfigError
from fedaug.methods.fedavgm import MOMENTUM_KEY, FedAvgM, FedAvgMConfig
from tests.helpers import killed_in_round
from tests.unit.methods.helpers import assert_equals_fedavg, bn_mlp, method_from_yaml, run_sim

RUN = RunContext(num_clients=2, num_classes=3, input_shape=(8,), seed=0, num_rounds=2)


def _updates(*weights: list[float]) -> list[ClientUpdate]:
    return [
        ClientUpdate(k, size, {"w": torch.tensor(w), "bn.running_var": torch.tensor(w), "n": torch.tensor(k)})
        for k, (size, w) in enumerate(zip((1, 3), weights, strict=True))
    ]


def test_momentum_zero_and_server_lr_one_is_fedavg(tmp_path: Path) -> None:
    method = FedAvgM(FedAvgMConfig(server_momentum=0.0, server_lr=1.0))
    assert_equals_fedavg(tmp_path, method, rounds=3, model_fn=lambda: bn_mlp())


def test_two_server_steps_by_hand() -> None:
    # Prepare: w = 0; sizes 1 and 3.
    method = FedAvgM(FedAvgMConfig(server_momentum=0.5, server_lr=2.0))
    start = {"w": torch.zeros(2), "bn.running_var": torch.ones(2), "n": torch.tensor(0)}
    state = method.init_server(start, RUN)
    assert set(state.extra[MOMENTUM_KEY]) == {"w"}  # BN statistics and integer buffers get no momentum
    # Execute: round 1, mean = (1 * [4, 0] + 3 * [0, 4]) / 4 = [1, 3], so Delta = [1, 3], m = Delta.
    state = method.server_update(state, _updates([4.0, 0.0], [0.0, 4.0]), RUN)
    # Assert: w = 0 + 2 m = [2, 6]; the running variance is the plain mean; integers the maximum.
    assert state.model_state["w"].tolist() == [2.0, 6.0]
    assert state.model_state["bn.running_var"].tolist() == [1.0, 3.0]
    assert state.model_state["n"].item() == 1
    # Execute: round 2, every client returns [2, 6]: Delta = 0, m = 0.5 m = [0.5, 1.5], w += 2 m.
    state = method.server_update(state, _updates([2.0, 6.0], [2.0, 6.0]), RUN)
    assert state.round_num == 2
    assert state.model_state["w"].tolist() == [3.0, 9.0]
    assert state.extra[MOMENTUM_KEY]["w"].tolist() == [0.5, 1.5]


def test_resumed_run_is_identical(tmp_path: Path) -> None:
    full_metrics, full_state = run_sim(tmp_path / "full", FedAvgM(), rounds=4, per_round=2)
    killed = killed_in_round(FedAvgM, kill_round=3, calls_before_kill=1)
    with pytest.raises(KeyboardInterrupt):
        run_sim(tmp_path / "cut", killed, rounds=4, per_round=2)
    ckpt = torch.load(tmp_path / "cut" / "ckpt" / "latest.pt", weights_only=True)
    cut_metrics, cut_state = run_sim(tmp_path / "cut", FedAvgM(), rounds=4, per_round=2)
    # Assert: the checkpoint carried a non-zero momentum, and the resumed run matches byte for byte.
    assert ckpt["round_num"] == 2
    assert any(bool(m.abs().sum() > 0) for m in ckpt["state"]["extra"][MOMENTUM_KEY].values())
    assert cut_metrics == full_metrics
    assert (tmp_path / "cut" / "summary.json").read_text() == (tmp_path / "full" / "summary.json").read_text()
    assert all(torch.equal(cut_state[k], full_state[k]) for k in full_state)


def test_momentum_changes_the_run(tmp_path: Path) -> None:
    _, plain = run_sim(tmp_path / "plain", FedAvgM(FedAvgMConfig(server_momentum=0.0)), rounds=3)
    _, momentum = run_sim(tmp_path / "momentum", FedAvgM(), rounds=3)
    assert not all(torch.equal(plain[k], momentum[k]) for k in plain)


def test_yaml_holds_the_defaults() -> None:
    method = method_from_yaml("fedavgm")
    assert isinstance(method, FedAvgM) and method.config == FedAvgMConfig()


@pytest.mark.parametrize("options", [{"server_momentum": 1.0}, {"server_momentum": -0.1}, {"server_lr": 0.0}])
def test_config_validation(options: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match=next(iter(options))):
        FedAvgMConfig(**options)
