"""FedAvgM: FedAvg with server momentum.

Measuring the Effects of Non-Identical Data Distribution for Federated Visual Classification. T.-M. H. Hsu,
H. Qi, M. Brown. arXiv:1909.06335, 2019.

Clients train as in FedAvg. The server treats ``Delta_t = mean_k w_k - w`` (FedAvg's weighted mean minus the
global weights, the negative of Hsu et al.'s pseudo-gradient ``Delta w``) as a step and accumulates it with
momentum: ``m <- beta m + Delta_t``, ``w <- w + server_lr m`` (the paper's ``v <- beta v + Delta w``,
``w <- w - v``, with a server learning rate as in Reddi et al.'s FedAvgM). ``beta = 0`` with
``server_lr = 1`` is FedAvg exactly (tested). The momentum buffer lives in ``ServerState.extra``
(``fedavgm_momentum``, float64), so it is checkpointed and a resumed run is identical.

# Deviation from paper: the paper weights clients equally or by data size as FedAvg; we use FedAvg's
# size-weighted mean. The paper's models have no batch norm: BN running statistics take FedAvg's mean (no
# momentum), integer buffers FedAvg's maximum (fedaug.methods.parts.server_steps).
# Deviation from paper: the paper's clients run SGD; we use the FLea protocol (Adam, lr 1e-3 decayed per
# round, 5 local epochs) for every method.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from fedaug.api import ClientUpdate, MethodConfig, RunContext, ServerState
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.parts.aggregate import weighted_average
from fedaug.methods.parts.checks import check_in_range, check_positive
from fedaug.methods.parts.server_steps import apply_step, client_delta, filled_like, stepped_keys
from fedaug.registry import register
from fedaug.types import StateDict

MOMENTUM_KEY = "fedavgm_momentum"


@dataclass(frozen=True)
class FedAvgMConfig(MethodConfig):
    """FedAvgM's hyper-parameters.

    Attributes:
        server_momentum: momentum beta of the server step (in [0, 1); default 0.9, the value Hsu et al. use
            most, from {0, 0.7, 0.9, 0.97, 0.99, 0.997}). 0 with server_lr 1 is FedAvg.
        server_lr: server learning rate (> 0; default 1, Hsu et al.'s update). The paper finds that the
            effective rate server_lr / (1 - beta) matters: 0.1 with beta 0.9 keeps FedAvg's step size.
    """

    server_momentum: float = 0.9
    server_lr: float = 1.0

    def __post_init__(self) -> None:
        check_in_range(self, ("server_momentum",), 0.0, 1.0, high_open=True)
        check_positive(self, ("server_lr",))


@register(
    "method",
    "fedavgm",
    summary="FedAvg whose server steps towards the clients' mean with momentum",
    paper="Hsu et al., arXiv 2019",
)
class FedAvgM(FedAvg):
    """FedAvg with server momentum.

    Client: FedAvg's. Server: ``m <- beta m + (mean_k w_k - w)``, ``w <- w + server_lr m`` on the trainable
    weights (FedAvg's mean for BN statistics), the momentum ``m`` in ``ServerState.extra``.
    """

    name = "fedavgm"
    config_cls = FedAvgMConfig
    config: FedAvgMConfig

    def init_server(self, model_state: StateDict, run: RunContext) -> ServerState:
        state = super().init_server(model_state, run)
        momentum = filled_like(model_state, stepped_keys(model_state))
        return replace(state, extra={**state.extra, MOMENTUM_KEY: momentum})

    def server_update(
        self, state: ServerState, updates: Sequence[ClientUpdate], run: RunContext
    ) -> ServerState:
        del run
        average = weighted_average([u.model_state for u in updates], [u.num_examples for u in updates])
        momentum: StateDict = state.extra[MOMENTUM_KEY]
        delta = client_delta(state.model_state, average, momentum)
        beta, lr = self.config.server_momentum, self.config.server_lr
        # beta = 0 and lr = 1 give FedAvg exactly: 0 * m + delta is delta, and 1 * delta is delta
        new_momentum = {key: beta * momentum[key] + delta[key] for key in delta}
        step = {key: lr * m for key, m in new_momentum.items()}
        model_state = apply_step(state.model_state, average, step)
        extra = {**state.extra, MOMENTUM_KEY: new_momentum}
        return replace(state, round_num=state.round_num + 1, model_state=model_state, extra=extra)
