"""FedAvg.

Communication-Efficient Learning of Deep Networks from Decentralized Data. H. B. McMahan, E. Moore,
D. Ramage, S. Hampson, B. Agüera y Arcas. AISTATS 2017. arXiv:1602.05629.

Client: loads the global weights and trains on its local data with cross-entropy (the FLea papers' protocol:
Adam, lr 1e-3 decayed x0.98 per round, batch 32, 5 local epochs). Server: weighted mean of the returned
weights by local data size, BN running statistics included.

FedAvg is the hooked client (:class:`~fedaug.training.client.HookedClient`: its client step and the hooks
later methods override) plus the weighted mean on the server. Methods that keep to the hooks can also be
trained with a round's clients batched (``engine.batched_clients``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fedaug.api import ClientUpdate, MethodConfig, RunContext, ServerState
from fedaug.methods.parts.aggregate import weighted_average
from fedaug.registry import register
from fedaug.training.client import HookedClient


@dataclass(frozen=True)
class FedAvgConfig(MethodConfig):
    """FedAvg has no hyper-parameters of its own (optimiser settings live in the train config)."""


@register(
    "method",
    "fedavg",
    summary="local cross-entropy training; the server averages the weights by local data size",
    paper="McMahan et al., AISTATS 2017",
)
class FedAvg(HookedClient):
    """Federated averaging.

    Client: :class:`~fedaug.training.client.HookedClient`'s step (``train_local`` with cross-entropy).
    Server: ``weighted_average`` of the client weights by local data size.
    """

    name: ClassVar[str] = "fedavg"
    config_cls: ClassVar[type[MethodConfig]] = FedAvgConfig

    def server_update(
        self, state: ServerState, updates: Sequence[ClientUpdate], run: RunContext
    ) -> ServerState:
        del run
        model_state = weighted_average(
            [update.model_state for update in updates], [update.num_examples for update in updates]
        )
        return ServerState(round_num=state.round_num + 1, model_state=model_state, extra=state.extra)
