"""FedAdam, FedYogi, FedAdagrad (Reddi et al.'s Algorithm 2): the first server steps by hand, the moments
checkpointed (exact resume), BN statistics averaged, the YAML defaults, validation."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from fedaug.api import ClientUpdate, RunContext
from fedaug.errors import ConfigError
from fedaug.methods.fedadagrad import FedAdagrad, FedAdagradConfig
from fedaug.methods.fedadam import FIRST_MOMENT_KEY, SECOND_MOMENT_KEY, AdaptiveServer, FedAdam, FedAdamConfig
from fedaug.methods.fedyogi import FedYogi, FedYogiConfig
from tests.helpers import killed_in_round
from tests.unit.methods.helpers import method_from_yaml, run_sim

RUN = RunContext(num_clients=2, num_classes=3, input_shape=(8,), seed=0, num_rounds=2)
START = [0.5, -1.0]
CLIENTS = ((1, [1.5, -1.0]), (3, [2.5, -1.5]))  # sizes and weights: the mean is [2.25, -1.375]


def _step(method: AdaptiveServer, clients: tuple[tuple[int, list[float]], ...] = CLIENTS) -> list[float]:
    start = {"w": torch.tensor(START, dtype=torch.float64), "bn.running_mean": torch.zeros(2)}
    state = method.init_server(start, RUN)
    updates = [
        ClientUpdate(k, size, {"w": torch.tensor(w, dtype=torch.float64), "bn.running_mean": torch.ones(2)})
        for k, (size, w) in enumerate(clients)
    ]
    new = method.server_update(state, updates, RUN)
    assert new.round_num == 1 and new.model_state["bn.running_mean"].tolist() == [1.0, 1.0]
    assert set(new.extra[FIRST_MOMENT_KEY]) == set(new.extra[SECOND_MOMENT_KEY]) == {"w"}
    result: list[float] = new.model_state["w"].tolist()
    return result


def _by_hand(
    second_moment: str, lr: float, tau: float, beta1: float = 0.9, beta2: float = 0.99
) -> list[float]:
    """Algorithm 2 written out for one coordinate at a time: m_{-1} = 0, v_{-1} = tau^2."""
    out = []
    for w0, mean in zip(START, [(1 * 1.5 + 3 * 2.5) / 4, (1 * -1.0 + 3 * -1.5) / 4], strict=True):
        delta = mean - w0
        m = (1 - beta1) * delta
        v0 = tau**2
        if second_moment == "adam":
            v = beta2 * v0 + (1 - beta2) * delta**2
        elif second_moment == "yogi":
            v = v0 - (1 - beta2) * delta**2 * math.copysign(1.0, v0 - delta**2)
        else:
            v = v0 + delta**2
        out.append(w0 + lr * m / (math.sqrt(v) + tau))
    return out


def test_fedadam_first_step_by_hand() -> None:
    # Delta = [1.75, -0.375]; m = 0.1 Delta; v = 0.99 tau^2 + 0.01 Delta^2; w + eta m / (sqrt(v) + tau)
    got = _step(FedAdam(FedAdamConfig(server_lr=0.1, tau=0.01)))
    assert got == pytest.approx(_by_hand("adam", 0.1, 0.01), rel=1e-12)
    # the first coordinate by hand: v = 0.99e-4 + 0.030625 = 0.030724, sqrt = 0.175282...
    assert got[0] == pytest.approx(0.5 + 0.1 * 0.175 / (math.sqrt(0.030724) + 0.01), rel=1e-12)


def test_fedyogi_and_fedadagrad_first_steps_by_hand() -> None:
    assert _step(FedYogi(FedYogiConfig(server_lr=0.1, tau=0.01))) == pytest.approx(
        _by_hand("yogi", 0.1, 0.01), rel=1e-12
    )
    assert _step(FedAdagrad(FedAdagradConfig(server_lr=0.1, tau=0.01))) == pytest.approx(
        _by_hand("adagrad", 0.1, 0.01), rel=1e-12
    )


def test_yogi_and_adam_part_where_the_second_moment_grows() -> None:
    # with Delta^2 > v_{-1}: Yogi adds (1 - beta2) Delta^2 (sign -1), as Adam; they differ by beta2's decay of
    # v_{-1} = tau^2 only, so with a large tau the steps differ
    adam = _step(FedAdam(FedAdamConfig(tau=0.5)))
    yogi = _step(FedYogi(FedYogiConfig(tau=0.5)))
    assert adam != yogi and adam == pytest.approx(_by_hand("adam", 0.01, 0.5))


@pytest.mark.parametrize("cls", [FedAdam, FedYogi, FedAdagrad])
def test_resumed_run_is_identical(tmp_path: Path, cls: type[AdaptiveServer]) -> None:
    full_metrics, full_state = run_sim(tmp_path / "full", cls(), rounds=4, per_round=2)
    killed = killed_in_round(cls, kill_round=3, calls_before_kill=1)
    with pytest.raises(KeyboardInterrupt):
        run_sim(tmp_path / "cut", killed, rounds=4, per_round=2)
    ckpt = torch.load(tmp_path / "cut" / "ckpt" / "latest.pt", weights_only=True)
    cut_metrics, cut_state = run_sim(tmp_path / "cut", cls(), rounds=4, per_round=2)
    assert ckpt["round_num"] == 2
    assert any(bool(m.abs().sum() > 0) for m in ckpt["state"]["extra"][FIRST_MOMENT_KEY].values())
    assert cut_metrics == full_metrics
    assert (tmp_path / "cut" / "summary.json").read_text() == (tmp_path / "full" / "summary.json").read_text()
    assert all(torch.equal(cut_state[k], full_state[k]) for k in full_state)


@pytest.mark.parametrize(
    ("name", "expected"),
    [("fedadam", FedAdam()), ("fedyogi", FedYogi()), ("fedadagrad", FedAdagrad())],
)
def test_yaml_holds_the_defaults(name: str, expected: AdaptiveServer) -> None:
    method = method_from_yaml(name)
    assert type(method) is type(expected) and method.config == expected.config


@pytest.mark.parametrize(
    "options", [{"server_lr": 0.0}, {"tau": -1.0}, {"beta1": 1.0}, {"beta2": float("nan")}]
)
def test_config_validation(options: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match=next(iter(options))):
        FedAdamConfig(**options)
    if "beta2" not in options:
        with pytest.raises(ConfigError, match=next(iter(options))):
            FedAdagradConfig(**options)
