"""What a loss hook is: the objective of one mini-batch, as :func:`fedaug.training.loop.train_local`, batched
clients (:mod:`fedaug.engine.batched.stacked`) and recorded steps (:mod:`fedaug.training.step_graphs`) call
it.

:mod:`fedaug.training.loop` re-exports every name here, which is where methods import them from.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn


@dataclass
class LossOutput:
    """A mini-batch objective and its detached scalar parts to log (e.g. ``{"ce": ..., "dcor": ...}``)."""

    loss: Tensor
    logs: dict[str, Tensor] = field(default_factory=dict)


LossFn = Callable[[nn.Module, Tensor, Tensor], LossOutput]
BatchTransform = Callable[[Tensor, Tensor, torch.Generator], tuple[Tensor, Tensor]]
ClientTensors = dict[str, Tensor]
ObjectiveFn = Callable[[nn.Module, Tensor, Tensor, ClientTensors, ClientTensors], LossOutput]


@dataclass(frozen=True)
class BatchableLoss:
    """A loss hook written so that the engine can also train a round's clients at once (``engine.batched_
    clients``, :mod:`fedaug.engine.batched.stacked`); called as a :data:`LossFn`, it is the same objective.

    ``fn(model, x, y, client, step)`` is the mini-batch objective. Everything that differs between the
    clients of a round reaches it as tensors: ``client`` (this client's constants, e.g. FedLC's logit shift;
    the same keys and shapes for every client) and ``step`` (the random numbers of one step, made by
    ``draws(batch_size)`` on the CPU from the client's own streams, in the order the sequential loop makes
    them, e.g. FLea's buffer indices and Beta weights). Whatever else ``fn`` uses (the broadcast weights, a
    frozen teacher model, config numbers) must be the same for every client of the round: the batched engine
    stacks ``client`` and ``step`` over the clients and calls the first client's ``fn`` for all of them, and
    recorded steps (``engine.cuda_graphs``, :mod:`fedaug.training.step_graphs`) replay the first client's
    ``fn`` with
    each client's ``client`` and ``step`` copied in. ``fn`` must keep no Python state between calls: a
    replayed step runs none of its Python.

    ``masked`` says that every mean ``fn`` takes over the batch goes through :mod:`fedaug.training.row_mask`
    (and no
    other of its values depends on the batch's size) and its ``draws`` have one row per sample, so it computes
    the same objective on a batch padded with masked rows: padded batched clients
    (``engine.batched_clients: padded``) train such hooks only.

    ``rounds_key`` (None: none) says more: whatever differs between rounds also reaches ``fn`` as ``client``
    tensors, except what the key holds (hashable config numbers of the round, such as a scheduled loss
    weight). Recorded steps of this hook's code then serve the hooks of later rounds with an equal key and
    ``client`` tensors of the same shapes, instead of being recorded again every round (FLea's).
    """

    fn: ObjectiveFn
    client: ClientTensors = field(default_factory=dict)
    draws: Callable[[int], ClientTensors] | None = None
    rounds_key: Hashable | None = None
    masked: bool = False

    def __call__(self, model: nn.Module, x: Tensor, y: Tensor) -> LossOutput:
        step = self.draws(x.shape[0]) if self.draws is not None else {}
        return self.fn(model, x, y, self.client, step)


def hook_code(fn: object) -> object:
    """What a hook runs: a function's code object (the same for every closure made by one ``def``), else the
    callable itself. Recorded steps are kept per hook code; a wrapping hook's ``rounds_key`` holds its base's.
    """
    return getattr(fn, "__code__", fn)
