"""FedAvg.

Communication-Efficient Learning of Deep Networks from Decentralized Data. H. B. McMahan, E. Moore,
D. Ramage, S. Hampson, B. Agüera y Arcas. AISTATS 2017. arXiv:1602.05629.

Client: loads the global weights and trains on its local data with cross-entropy (the FLea papers' protocol:
Adam, lr 1e-3 decayed x0.98 per round, batch 32, 5 local epochs). Server: weighted mean of the returned
weights by local data size, BN running statistics included.

Later methods subclass :class:`FedAvg` and override only its hooks: :meth:`FedAvg.loss_fn` (loss-based
methods), :meth:`FedAvg.batch_transform` (augmentation-based methods), :meth:`FedAvg.training_data` (FedData)
and :meth:`FedAvg.kept_state` (MOON). Methods that keep to these hooks can also be trained with a round's
clients batched (``engine.batched_clients``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from fedaug.api import (
    ClientContext,
    ClientData,
    ClientUpdate,
    Method,
    MethodConfig,
    Payload,
    RunContext,
    ServerState,
)
from fedaug.local_training import (
    BatchTransform,
    LossFn,
    cross_entropy_loss,
    load_weights,
    snapshot_state,
    train_local,
)
from fedaug.methods.aggregate import weighted_average
from fedaug.registry import register


@dataclass(frozen=True)
class FedAvgConfig(MethodConfig):
    """FedAvg has no hyper-parameters of its own (optimiser settings live in the train config)."""


@register("method", "fedavg")
class FedAvg(Method):
    """Federated averaging.

    Client: ``train_local`` with :meth:`loss_fn` (cross-entropy) and :meth:`batch_transform` (none).
    Server: ``weighted_average`` of the client weights by local data size.
    """

    name: ClassVar[str] = "fedavg"
    config_cls: ClassVar[type[MethodConfig]] = FedAvgConfig

    def loss_fn(self, payload: Payload, ctx: ClientContext) -> LossFn:
        """The local objective; subclasses add their terms here."""
        del payload, ctx
        return cross_entropy_loss

    def batch_transform(self, payload: Payload, ctx: ClientContext) -> BatchTransform | None:
        """An optional per-batch transform; subclasses add augmentation here."""
        del payload, ctx
        return None

    def training_data(self, payload: Payload, ctx: ClientContext) -> ClientData:
        """The data the client trains on (FedData: its own plus the shared pool); the update still counts
        ``ctx.data``'s examples for aggregation."""
        del payload
        return ctx.data

    def kept_state(self, update: ClientUpdate) -> Any:
        """What the client keeps for its next participation (MOON: its trained weights); None: nothing."""
        del update
        return None

    def client_update(self, payload: Payload, ctx: ClientContext) -> ClientUpdate:
        load_weights(ctx.model, payload.model_state)
        metrics = train_local(
            ctx.model,
            self.training_data(payload, ctx),
            loss_fn=self.loss_fn(payload, ctx),
            settings=payload.train,
            generator=ctx.generator,
            batch_transform=self.batch_transform(payload, ctx),
        )
        update = ClientUpdate(
            client_id=ctx.client_id,
            num_examples=ctx.data.num_examples,
            model_state=snapshot_state(ctx.model),
            metrics=metrics,
        )
        return replace(update, client_state=self.kept_state(update))

    def server_update(
        self, state: ServerState, updates: Sequence[ClientUpdate], run: RunContext
    ) -> ServerState:
        del run
        model_state = weighted_average(
            [update.model_state for update in updates], [update.num_examples for update in updates]
        )
        return ServerState(round_num=state.round_num + 1, model_state=model_state, extra=state.extra)
