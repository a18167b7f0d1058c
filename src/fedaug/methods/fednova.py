"""FedNova: FedAvg with the client updates normalised by their local step counts.

Tackling the Objective Inconsistency Problem in Heterogeneous Federated Optimization. J. Wang, Q. Liu,
H. Liang, G. Joshi, H. V. Poor. NeurIPS 2020. arXiv:2007.07481.

Clients train as in FedAvg; client k takes ``tau_k`` local steps (``train/steps``: local epochs times its
number of mini-batches, so clients with more data take more steps). Plain FedAvg then over-weights the
clients that took more steps, and converges to a mismatched objective. FedNova averages the normalised
updates ``d_k = (w_k - w) / a_k`` with the data weights ``p_k = n_k / sum_j n_j`` of the round's clients and
rescales by the effective step count ``tau_eff = sum_k p_k a_k``::

    w <- w + tau_eff sum_k p_k (w_k - w) / a_k

with ``a_k = tau_k`` (the paper's vanilla-SGD case, ``a_k = ||a_k||_1``). When every client took the same
number of steps this is FedAvg's weighted mean exactly (tested). No option and no state.

# Deviation from paper: a_k = tau_k for every local optimizer. The paper derives a_k for SGD with momentum
# and for proximal updates; under the FLea protocol's Adam (fedaug's default local optimizer) there is no
# closed form, and the plain step count is the usual choice (Flower's FedNova baseline counts steps for plain
# SGD; FL-bench and PFLlib have no FedNova). Checked against the paper's update, and where Flower's baseline
# departs from it (its aggregate divides by the sum of the scales), in
# tests/unit/methods/test_published_references.py.
# Deviation from paper: BN running statistics (the paper's models have none) take FedAvg's mean and integer
# buffers its maximum; the normalised step moves the trainable weights only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from fedaug.api import ClientUpdate, MethodConfig, RunContext, ServerState
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.parts.aggregate import weighted_average
from fedaug.methods.parts.server_steps import apply_step, local_steps, stepped_keys
from fedaug.registry import register
from fedaug.types import StateDict


@dataclass(frozen=True)
class FedNovaConfig(MethodConfig):
    """FedNova has no hyper-parameters (the step counts come from the clients' training)."""


def nova_coefficients(sizes: Sequence[int], steps: Sequence[int]) -> list[float]:
    """``c_k = tau_eff p_k / tau_k`` with ``p_k = n_k / sum n`` and ``tau_eff = sum_k p_k tau_k``."""
    total = sum(sizes)
    tau_eff = sum(n * t for n, t in zip(sizes, steps, strict=True)) / total
    return [tau_eff * n / (total * t) for n, t in zip(sizes, steps, strict=True)]


def normalized_step(
    global_state: StateDict, states: Sequence[StateDict], coefficients: Sequence[float], keys: Sequence[str]
) -> StateDict:
    """``sum_k c_k (w_k - w)`` in float64 for ``keys``."""
    step: StateDict = {}
    for key in keys:
        base = global_state[key].to(torch.float64)
        acc = torch.zeros_like(base)
        for state, coefficient in zip(states, coefficients, strict=True):
            acc.add_(state[key].to(torch.float64) - base, alpha=coefficient)
        step[key] = acc
    return step


@register(
    "method",
    "fednova",
    summary="FedAvg whose server normalises each client's update by its number of local steps",
    paper="Wang et al., NeurIPS 2020",
)
class FedNova(FedAvg):
    """FedNova: normalised averaging.

    Client: FedAvg's (its ``train/steps`` is tau_k). Server: ``w + tau_eff sum_k p_k (w_k - w) / tau_k`` on
    the trainable weights, FedAvg's mean for BN statistics; logs ``fednova/tau_eff``.
    """

    name = "fednova"
    config_cls = FedNovaConfig
    config: FedNovaConfig

    def server_update(
        self, state: ServerState, updates: Sequence[ClientUpdate], run: RunContext
    ) -> ServerState:
        del run
        sizes = [u.num_examples for u in updates]
        steps = [local_steps(u) for u in updates]
        average = weighted_average([u.model_state for u in updates], sizes)
        tau_eff = sum(n * t for n, t in zip(sizes, steps, strict=True)) / sum(sizes)
        extra = {**state.extra, "tau_eff": tau_eff}
        if len(set(steps)) == 1:
            # equal step counts: c_k = p_k and the update is FedAvg's weighted mean, computed (and rounded) as
            # FedAvg computes it
            return replace(state, round_num=state.round_num + 1, model_state=average, extra=extra)
        coefficients = nova_coefficients(sizes, steps)
        keys = stepped_keys(state.model_state)
        step = normalized_step(state.model_state, [u.model_state for u in updates], coefficients, keys)
        model_state = apply_step(state.model_state, average, step)
        return replace(state, round_num=state.round_num + 1, model_state=model_state, extra=extra)

    def round_metrics(self, state: ServerState) -> dict[str, float]:
        tau_eff = state.extra.get("tau_eff")
        return {} if tau_eff is None else {"fednova/tau_eff": float(tau_eff)}
