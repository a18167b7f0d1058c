"""Local training: every client trains alone, a reference run (the floor beside FedAvg), not a paper's method.

The "local-only" baseline of personalised-FL benchmarks: FL-bench's ``local`` (``Local-only``: a personal
model per client, kept by the server) and PFLlib's ``Local`` train each client's model on its own data only
and report the clients' mean accuracy, to show what federation adds over training alone (PFLlib's issues
ask why "local beats FedAvg" under strong label skew: on its local test split a client that sees two classes
only has to tell two apart).

Every client starts from the run's initial weights (the same as FedAvg's global model before round 1) and
keeps its own model across rounds; nothing is ever averaged. In each round the sampled clients take exactly
FedAvg's local update (the same loss, optimizer, epochs, batches and keyed generator) on their own model, so
the budget is FedAvg's: a client trains in the rounds it is sampled, as it would under FedAvg. Its model is
its client state (the engine keeps and checkpoints it; on Flower it stays on the node) and is also sent to
the server, which keeps the latest model of every client in ``ServerState.extra`` for evaluation only; the
global weights never change. The engine evaluates every client's model (:class:`~fedaug.api.
KeepsClientModels`): ``test/acc`` is the mean client's accuracy on the global test set, ``test/client_acc``
each client's, ``local/acc`` client i's model on client i's local test split (``partition.
local_test_fraction``). A client never sampled is evaluated with the initial weights. A client's model
that did not change since its last evaluation keeps that evaluation's numbers (the engine's cache: only the
round's participants are evaluated again), so a round costs about FedAvg's plus a participant's evaluation
each.

With one client and full participation this is FedAvg bit for bit (the mean of one model is that model;
tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from fedaug.api import ClientContext, ClientUpdate, MethodConfig, Payload, RunContext, ServerState
from fedaug.registry import register
from fedaug.training.client import HookedClient
from fedaug.types import ClientId, StateDict

MODELS_KEY = "local_models"
"""``ServerState.extra`` key: client id -> that client's latest weights (clients that trained so far)."""


@dataclass(frozen=True)
class LocalConfig(MethodConfig):
    """Local training has no hyper-parameters of its own (the local update is FedAvg's train config)."""


@register(
    "method",
    "local",
    summary="the floor: every client trains its own model alone, never averaged; reports the mean client",
    paper="a reference run, as FL-bench's Local-only and PFLlib's Local: Zhang et al., arXiv 2023",
)
class Local(HookedClient):
    """Every client trains alone.

    Client: FedAvg's local update, started from its own model (its client state; the initial weights the
    first time), which it keeps and returns. Server: keeps each returned model in ``extra`` by client id;
    the global weights stay the initial ones (the start of a client's first participation).
    """

    name: ClassVar[str] = "local"
    config_cls: ClassVar[type[MethodConfig]] = LocalConfig

    def init_server(self, model_state: StateDict, run: RunContext) -> ServerState:
        del run
        return ServerState(round_num=0, model_state=model_state, extra={MODELS_KEY: {}})

    def client_update(self, payload: Payload, ctx: ClientContext) -> ClientUpdate:
        own: StateDict | None = ctx.client_state
        start = payload if own is None else replace(payload, model_state=own)
        return super().client_update(start, ctx)

    def kept_state(self, update: ClientUpdate) -> Any:
        """The client's trained weights, its start in its next participation."""
        return update.model_state

    def server_update(
        self, state: ServerState, updates: Sequence[ClientUpdate], run: RunContext
    ) -> ServerState:
        del run
        models: dict[ClientId, StateDict] = dict(state.extra[MODELS_KEY])
        models.update({update.client_id: update.model_state for update in updates})
        extra = {**state.extra, MODELS_KEY: models}
        return replace(state, round_num=state.round_num + 1, extra=extra)

    def client_eval_states(self, state: ServerState, run: RunContext) -> list[StateDict]:
        """Client i's latest model, or the initial weights for a client not sampled yet."""
        models: dict[ClientId, StateDict] = state.extra[MODELS_KEY]
        return [models.get(client, state.model_state) for client in range(run.num_clients)]
