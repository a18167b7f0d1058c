"""FedNova: equal local steps is FedAvg exactly; unequal steps and sizes by hand; the coefficients."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedaug.api import ClientUpdate, RunContext
from fedaug.errors import FedaugError
from fedaug.methods.fednova import FedNova, normalized_step, nova_coefficients
from fedaug.methods.parts.aggregate import weighted_average
from tests.unit.methods.helpers import assert_equals_fedavg, bn_mlp, method_from_yaml

RUN = RunContext(num_clients=2, num_classes=3, input_shape=(8,), seed=0, num_rounds=1)


def _update(k: int, size: int, steps: int, w: list[float]) -> ClientUpdate:
    state = {"w": torch.tensor(w, dtype=torch.float64), "bn.running_var": torch.tensor(w)}
    state["n"] = torch.tensor(k)
    return ClientUpdate(k, size, state, metrics={"train/steps": float(steps), "train/loss": 1.0})


def test_equal_local_steps_is_fedavg(tmp_path: Path) -> None:
    # make_spec's clients hold 20 samples each: with batch 8, every client takes 3 steps per epoch
    assert_equals_fedavg(tmp_path, FedNova(), rounds=3, model_fn=lambda: bn_mlp())


def test_unequal_steps_and_sizes_by_hand() -> None:
    # Prepare: w = 0; client 0 holds 1 sample and took 1 step to w_0 = 2; client 1 holds 3 and took 3 steps to
    # w_1 = 6 (the same per-step progress, 2 per step).
    start = {"w": torch.zeros(1, dtype=torch.float64), "bn.running_var": torch.ones(1), "n": torch.tensor(0)}
    state = FedNova().init_server(start, RUN)
    updates = [_update(0, 1, 1, [2.0]), _update(1, 3, 3, [6.0])]
    # Execute
    new = FedNova().server_update(state, updates, RUN)
    # Assert: p = (1/4, 3/4), tau_eff = 1/4 + 9/4 = 2.5, d = (2, 2): w = 2.5 * 2 = 5, where FedAvg gives
    # 1/4 * 2 + 3/4 * 6 = 5 too (the same per-step progress) ...
    assert new.model_state["w"].item() == pytest.approx(5.0)
    assert FedNova().round_metrics(new) == {"fednova/tau_eff": 2.5}
    # ... BN statistics take FedAvg's mean, integers the maximum
    assert new.model_state["bn.running_var"].item() == pytest.approx(5.0)
    assert new.model_state["n"].item() == 1
    # Execute: client 1 now moved only 3 in its 3 steps (1 per step): d = (2, 1)
    new = FedNova().server_update(state, [_update(0, 1, 1, [2.0]), _update(1, 3, 3, [3.0])], RUN)
    # Assert: w = 2.5 * (1/4 * 2 + 3/4 * 1) = 3.125; FedAvg would give 1/4 * 2 + 3/4 * 3 = 2.75
    assert new.model_state["w"].item() == pytest.approx(3.125)
    assert new.model_state["bn.running_var"].item() == pytest.approx(2.75)


def test_general_formula_with_equal_steps_is_the_weighted_mean() -> None:
    # the branch for equal steps is FedAvg's mean; the general formula agrees with it up to rounding
    sizes, steps = [5, 7, 11], [4, 4, 4]
    coefficients = nova_coefficients(sizes, steps)
    assert coefficients == pytest.approx([n / 23 for n in sizes], rel=1e-15)
    gen = torch.Generator().manual_seed(0)
    start = {"w": torch.randn(6, generator=gen)}
    states = [{"w": torch.randn(6, generator=gen)} for _ in sizes]
    step = normalized_step(start, states, coefficients, ["w"])
    mean = weighted_average(states, sizes)["w"]
    torch.testing.assert_close((start["w"].double() + step["w"]).float(), mean)


def test_more_steps_weigh_less_per_step() -> None:
    # tau_eff p_k / tau_k: with equal sizes, the client with 4x the steps gets 1/4 of the other's coefficient
    low, high = nova_coefficients([10, 10], [1, 4])
    assert high / low == pytest.approx(0.25)
    assert low + high > 1  # sum_k c_k = tau_eff sum_k p_k / tau_k >= 1 (Cauchy-Schwarz)


def test_a_client_update_without_steps_is_refused() -> None:
    update = ClientUpdate(0, 3, {"w": torch.zeros(1)})
    state = FedNova().init_server({"w": torch.zeros(1)}, RUN)
    with pytest.raises(FedaugError, match="train/steps"):
        FedNova().server_update(state, [update], RUN)


def test_yaml_names_the_method() -> None:
    assert isinstance(method_from_yaml("fednova"), FedNova)
