"""The hooked client: the client step every local-training method shares, and the hooks it is changed by.

A method subclasses :class:`HookedClient` (or :class:`~fedaug.methods.fedavg.FedAvg`, which adds the weighted
mean on the server) and overrides only its hooks: :meth:`HookedClient.loss_fn` (loss-based methods),
:meth:`HookedClient.batch_transform` (augmentation-based methods), :meth:`HookedClient.training_data`
(FedData)
and :meth:`HookedClient.kept_state` (MOON). The engine trains any such method's clients one at a time, or a
round's clients at once (``engine.batched_clients``), through these hooks alone, so it needs no method.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fedaug.api import ClientContext, ClientData, ClientUpdate, Method, Payload
from fedaug.training.loop import (
    BatchTransform,
    LossFn,
    cross_entropy_loss,
    load_weights,
    snapshot_state,
    train_local,
)


class HookedClient(Method):
    """Client: load the global weights, then ``train_local`` with :meth:`loss_fn` (cross-entropy) and
    :meth:`batch_transform` (none) on :meth:`training_data`; keep :meth:`kept_state`. The server step is the
    subclass's."""

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


def trains_through_hooks(method: Method) -> bool:
    """Whether ``method``'s client step is :class:`HookedClient`'s own (so its hooks say all it does)."""
    return isinstance(method, HookedClient) and type(method).client_update is HookedClient.client_update


def keeps_client_state(method: Method) -> bool:
    """Whether ``method``'s clients keep a state between rounds (MOON, SCAFFOLD, FedDyn, local: they override
    :meth:`HookedClient.kept_state`)."""
    return isinstance(method, HookedClient) and type(method).kept_state is not HookedClient.kept_state
