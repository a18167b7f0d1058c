"""Centralized training: one model on the pooled data of all clients, a reference run (the ceiling beside
FedAvg), not a paper's method.

The pooled-data upper bound that label-skew papers quote beside FedAvg (Zhao et al., "Federated Learning with
Non-IID Data", arXiv:1806.00582, compare FedAvg with SGD on the pooled data) trains one model on the union of
the clients' training data, to show how much accuracy federation on skewed data leaves behind. FL-bench and
PFLlib have no such method; this one keeps FedAvg's training schedule so the two runs compare round by round.

Before round 1 every client sends all its training samples to the server (the share phase of FedData, with
everything shared), which pools them in client order. Each round the server trains the one model on the pool
with FedAvg's local training (the same model, loss, optimizer, lr schedule and batch size) for exactly as
many gradient steps as the round's sampled clients would take under FedAvg: ``S = sum_i E * b(n_i)``, with E
the local epochs and ``b(n_i)`` the mini-batches of client i's ``n_i`` samples
(:func:`fedaug.training.loop.steps_per_epoch`, FedAvg's own batching); each client reports its ``b(n_i) * E``
as ``train/steps``. So a round costs the gradient computations of a FedAvg round and the curves align by
round: with every client in every round that is a little over E epochs of the pool a round (each client's
last batch may be short; the pool's batches are full), with a fraction C of the clients about C * E. The
batches are drawn in epochs of the pool, each in a fresh order, the last one cut short; the optimizer is
built afresh every round, as every FedAvg client's is. Clients do not train; the model is evaluated like
FedAvg's global model.

The batch order comes from the generator FedAvg's client 0 uses in the round (``seed_for(seed, "client",
round, 0)``): any fixed keyed stream would do; this one makes the one-client run FedAvg's bit for bit
(tested). The pool lives in ``ServerState.extra`` and so in every checkpoint (the whole training set: fine for
the small datasets reference runs are for, about 600 MB for CIFAR-10).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import torch

from fedaug.api import (
    ClientContext,
    ClientData,
    ClientShare,
    ClientUpdate,
    Method,
    MethodConfig,
    Payload,
    RunContext,
    ServerState,
    ShareRequest,
    TrainSettings,
)
from fedaug.errors import FedaugError
from fedaug.methods.parts import data_pool
from fedaug.methods.parts.payloads import SharedSamples, read_extra
from fedaug.methods.parts.server_steps import STEPS_METRIC
from fedaug.registry import register
from fedaug.runtime.seeding import torch_generator
from fedaug.training.loop import (
    cross_entropy_loss,
    load_weights,
    snapshot_state,
    steps_per_epoch,
    train_local,
)
from fedaug.types import ClientId, Metrics

SETTINGS_KEY = "centralized_train"
"""``ClientUpdate.extra`` key: the round's :class:`~fedaug.api.TrainSettings`, which the server's step needs
(``server_update`` is not handed them; each client returns the payload's)."""
TRAINED_KEY = "centralized_trained"
"""``ServerState.extra`` key: the last round's pooled training metrics (``train_local``'s)."""


@dataclass(frozen=True)
class CentralizedConfig(MethodConfig):
    """Centralized training has no hyper-parameters of its own (the pooled model trains with the train
    config; its step count is FedAvg's)."""


@register(
    "method",
    "centralized",
    summary="the ceiling: one model on the pooled data of all clients, FedAvg's gradient steps per round",
    paper="a reference run, the pooled-data bound of e.g. Zhao et al., arXiv 2018",
)
class Centralized(Method):
    """One model trained on the pooled data.

    Client: shares all its samples once, before round 1; in a round it does not train and returns the global
    weights unchanged with the steps FedAvg would take on its data (``train/steps``) and the round's
    settings. Server: pools the shares; each round trains the model on the pool for the sum of the sampled
    clients' steps. Logs ``train/loss`` (the pooled training's), ``centralized/steps`` and the pool's size
    and upload (``centralized/pool_size``, ``centralized/bytes_up_per_client``).
    """

    name: ClassVar[str] = "centralized"
    config_cls: ClassVar[type[MethodConfig]] = CentralizedConfig

    def init_server(self, model_state: dict[str, torch.Tensor], run: RunContext) -> ServerState:
        extra = data_pool.empty_pool(run.input_shape, (), torch.long, device=run.device)
        return ServerState(round_num=0, model_state=model_state, extra=extra)

    def share_request(
        self, state: ServerState, *, round_num: int, participants: Sequence[ClientId], run: RunContext
    ) -> ShareRequest | None:
        del participants
        return data_pool.pool_request(state, round_num, run)

    def client_share(self, request: ShareRequest, ctx: ClientContext) -> ClientShare:
        del request
        samples = SharedSamples(ctx.data.x, ctx.data.y)
        return ClientShare(ctx.client_id, extra=samples.to_extra())

    def receive_shares(
        self, state: ServerState, shares: Sequence[ClientShare], run: RunContext
    ) -> ServerState:
        return data_pool.receive_pool(state, shares, run)

    def payload(self, state: ServerState, round_num: int, train: TrainSettings) -> Payload:
        """The weights and settings only: the pool stays on the server."""
        return Payload(round_num=round_num, model_state=state.model_state, train=train)

    def client_update(self, payload: Payload, ctx: ClientContext) -> ClientUpdate:
        steps = payload.train.local_epochs * steps_per_epoch(ctx.data.num_examples, payload.train.batch_size)
        return ClientUpdate(
            client_id=ctx.client_id,
            num_examples=ctx.data.num_examples,
            model_state=payload.model_state,
            metrics={STEPS_METRIC: float(steps)},
            extra={SETTINGS_KEY: payload.train},
        )

    def server_update(
        self, state: ServerState, updates: Sequence[ClientUpdate], run: RunContext
    ) -> ServerState:
        round_num = state.round_num + 1
        steps = sum(int(update.metrics[STEPS_METRIC]) for update in updates)
        if steps == 0:  # no sampled client has data
            return replace(state, round_num=round_num, extra={**state.extra, TRAINED_KEY: {}})
        if run.workspace is None:
            raise FedaugError("centralized trains on the server and needs the engine's workspace models")
        # engine.cuda_graphs comes back as the payload had it: the server's in the engine; on Flower the
        # node's (set by its own device): a CPU runs the same steps unrecorded, a GPU server behind CPU
        # nodes trains eagerly (the same numbers, slower)
        settings: TrainSettings = read_extra(updates[0].extra, SETTINGS_KEY, self.name)
        pool = data_pool.DataPool.from_extra(state.extra)
        model = run.workspace("centralized")
        load_weights(model, state.model_state)
        metrics = train_local(
            model,
            ClientData(0, pool.x, pool.y, run.num_classes),
            loss_fn=cross_entropy_loss,
            settings=settings,
            generator=torch_generator(run.seed, "client", round_num, 0),  # client 0's: see the module doc
            max_steps=steps,
        )
        extra = {**state.extra, TRAINED_KEY: metrics}
        return replace(state, round_num=round_num, model_state=snapshot_state(model), extra=extra)

    def round_metrics(self, state: ServerState) -> Metrics:
        """The pooled training's ``train/*`` (its ``train/steps`` as ``centralized/steps``: the clients'
        ``train/steps`` stays their mean, as FedAvg's), the pool's size and the bytes each client uploaded."""
        trained: Metrics = state.extra.get(TRAINED_KEY, {})
        metrics = {key: value for key, value in trained.items() if key != STEPS_METRIC}
        metrics["centralized/steps"] = trained.get(STEPS_METRIC, 0.0)
        pool = data_pool.pool_metrics("centralized", state.extra)
        for key in ("centralized/pool_size", "centralized/bytes_up_per_client"):  # nothing is sent down
            metrics[key] = pool[key]
        return metrics
