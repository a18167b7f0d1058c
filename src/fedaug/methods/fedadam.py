"""FedAdam, and the adaptive server step FedYogi and FedAdagrad share.

Adaptive Federated Optimization. S. J. Reddi, Z. Charles, M. Zaheer, Z. Garrett, K. Rush, J. Konečný,
S. Kumar, H. B. McMahan. ICLR 2021. arXiv:2003.00295. Algorithm 2 (FedAdagrad, FedYogi, FedAdam).

Clients train as in FedAvg. With ``Delta_t = mean_k w_k - w`` (FedAvg's weighted mean minus the global
weights), the server keeps two moments, element-wise::

    m_t = beta1 m_{t-1} + (1 - beta1) Delta_t
    v_t = v_{t-1} + Delta_t^2                                             FedAdagrad
    v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)       FedYogi
    v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2                           FedAdam
    w  <- w + server_lr m_t / (sqrt(v_t) + tau)

with ``m_{-1} = 0`` and ``v_{-1} = tau^2`` (the paper's ``v_{-1} >= tau^2``), and no bias correction, as in
Algorithm 2. The moments live in ``ServerState.extra`` (``fedopt_m``, ``fedopt_v``, float64): checkpointed, so
a resumed run is identical.

Defaults: beta1 = 0.9, beta2 = 0.99 (the paper fixes them for every task). The paper tunes server_lr and
tau per task on log10 grids; our defaults (FedAdam and FedYogi server_lr 10^-2, tau 10^-3; FedAdagrad
server_lr 10^-1, tau 10^-2) are values inside those grids, not checked against its tables.

# Deviation from paper: Algorithm 2 averages the client deltas unweighted; we use FedAvg's size-weighted
# mean. The paper's models use group norm: BN running statistics take FedAvg's mean (no server step), integer
# buffers FedAvg's maximum (fedaug.methods.parts.server_steps).
# Deviation from paper: the paper's clients run SGD with a tuned client lr; we use the FLea protocol (Adam,
# lr 1e-3 decayed per round, 5 local epochs) for every method.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from fedaug.api import ClientUpdate, MethodConfig, RunContext, ServerState
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.parts.aggregate import weighted_average
from fedaug.methods.parts.checks import check_in_range, check_positive
from fedaug.methods.parts.server_steps import apply_step, client_delta, filled_like, stepped_keys
from fedaug.registry import register
from fedaug.types import StateDict

FIRST_MOMENT_KEY = "fedopt_m"
SECOND_MOMENT_KEY = "fedopt_v"


@dataclass(frozen=True)
class FedAdamConfig(MethodConfig):
    """FedAdam's hyper-parameters (FedYogi's are the same).

    Attributes:
        server_lr: server learning rate eta (> 0; default 0.01; the paper tunes it per task on a log10 grid).
        tau: adaptivity tau, added to sqrt(v) and squared as v's start
            (> 0; default 0.001; the paper tunes it per task on a log10 grid).
        beta1: decay of the first moment (in [0, 1); default 0.9, the paper's).
        beta2: decay of the second moment (in [0, 1); default 0.99, the paper's).
    """

    server_lr: float = 0.01
    tau: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.99

    def __post_init__(self) -> None:
        check_positive(self, ("server_lr", "tau"))
        check_in_range(self, ("beta1", "beta2"), 0.0, 1.0, high_open=True)


class AdaptiveServer(FedAvg):
    """FedAvg's clients with Reddi et al.'s adaptive server step; subclasses give the second moment's rule
    (:meth:`second_moment`). The config has ``server_lr``, ``tau`` and ``beta1`` (and ``beta2`` where the
    rule uses it)."""

    config: Any

    def second_moment(self, v: torch.Tensor, delta_sq: torch.Tensor) -> torch.Tensor:
        """``v_t`` from ``v_{t-1}`` and ``Delta_t^2``."""
        raise NotImplementedError

    def init_server(self, model_state: StateDict, run: RunContext) -> ServerState:
        state = super().init_server(model_state, run)
        keys = stepped_keys(model_state)
        moments = {
            FIRST_MOMENT_KEY: filled_like(model_state, keys),
            SECOND_MOMENT_KEY: filled_like(model_state, keys, float(self.config.tau) ** 2),
        }
        return replace(state, extra={**state.extra, **moments})

    def server_update(
        self, state: ServerState, updates: Sequence[ClientUpdate], run: RunContext
    ) -> ServerState:
        del run
        average = weighted_average([u.model_state for u in updates], [u.num_examples for u in updates])
        m_prev: StateDict = state.extra[FIRST_MOMENT_KEY]
        v_prev: StateDict = state.extra[SECOND_MOMENT_KEY]
        delta = client_delta(state.model_state, average, m_prev)
        beta1, lr, tau = self.config.beta1, self.config.server_lr, self.config.tau
        m = {key: beta1 * m_prev[key] + (1 - beta1) * d for key, d in delta.items()}
        v = {key: self.second_moment(v_prev[key], d * d) for key, d in delta.items()}
        step = {key: lr * m[key] / (v[key].sqrt() + tau) for key in delta}
        model_state = apply_step(state.model_state, average, step)
        extra = {**state.extra, FIRST_MOMENT_KEY: m, SECOND_MOMENT_KEY: v}
        return replace(state, round_num=state.round_num + 1, model_state=model_state, extra=extra)


@register(
    "method",
    "fedadam",
    summary="FedAvg's clients; the server steps with Adam on the clients' mean update",
    paper="Reddi et al., ICLR 2021",
)
class FedAdam(AdaptiveServer):
    """FedAdam: ``v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2``."""

    name = "fedadam"
    config_cls = FedAdamConfig
    config: FedAdamConfig

    def second_moment(self, v: torch.Tensor, delta_sq: torch.Tensor) -> torch.Tensor:
        beta2 = self.config.beta2
        return beta2 * v + (1 - beta2) * delta_sq
