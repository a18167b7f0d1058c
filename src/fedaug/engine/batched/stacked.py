"""Batched clients (``engine.batched_clients``): a round's clients trained at once with stacked weights.

For small models one local step is mostly fixed per-step cost (Python, kernel launches, one optimizer call
per tensor), not arithmetic; on a GPU a HARNet step leaves the device nearly idle. This module stacks the
weights, buffers and optimizer state of the round's clients along a new leading axis and runs one
``torch.func.vmap(torch.func.grad(...))`` of a ``torch.func.functional_call`` per step for all of them,
followed by one functional Adam/SGD update of the stacked tensors. BatchNorm is handled functionally: the
running statistics are stacked buffers that the vmapped batch norm updates in place per client, exactly as
in the sequential loop.

Which methods: every method whose client step is :func:`fedaug.training.loop.train_local` with a loss hook
(``HookedClient.client_update`` and its hooks: training data, kept state), when its loss is plain
cross-entropy
or a :class:`~fedaug.training.loop.BatchableLoss`: FedAvg, FedProx, FedDecorr, FedLC, FedNTD, FedRS, MOON,
FedMix, FedData, CCVR, Fed-ZDAS, FLea and ``flea_official``'s objective, the server-side methods (FedAvgM,
FedAdam, FedYogi, FedAdagrad, FedNova), and every ``*_augmix`` variant, with or without a batch transform
(applied per client before stacking: it never depends on the weights). The rest train one by one, and
:class:`~fedaug.engine.simulation.Simulation` logs why once per run: Fed-ZDAC, q-FFL, SCAFFOLD and FedDyn (a
client step of their own), FedBR (its loss trains a per-client discriminator with an optimizer of
its own every step) and FedGen (its loss draws from the generator inside; both batch while they are plain
CE), and settings the functional optimizer does not repeat (``reset_optimizer_every_step``, bf16,
BatchNorm frozen in training, dropout). ``tests/unit/engine/test_batched_more.py`` checks this list.

Why not :func:`~fedaug.training.loop.train_local`: that loop owns one stateful module and one
``torch.optim`` optimizer and steps them client after client; stacking needs parameters as plain tensors
(``functional_call``), gradients from ``torch.func.grad`` instead of ``backward`` and an optimizer written as
tensor arithmetic on stacked state, so the step itself cannot be shared. Everything around it is reused: the
batch schedule (:func:`~fedaug.training.loop.batch_indices`, one ``randperm`` per epoch from each client's
own generator, then the batch transform and the loss's draws in the same order, so every client sees the same
batches and random numbers as sequentially), the objective, the finiteness check and the metrics. The
functional optimizers repeat ``torch.optim.Adam`` / ``SGD`` (single-tensor path) operation by operation, on
all weights at once: the stacked weights and optimizer state are one ``[clients, P]`` tensor
(:class:`FlatRows`), which the model reads through per-tensor views, so gathering a group's rows, scattering
them back and the update are one operation each, not one per tensor; results equal the sequential loop to
float rounding (tested to 1e-10 in float64).

Clients of unequal size: every client runs its own number of steps. At each step the clients that still have
a batch take it; those whose batches have the same shape are stacked into one vmapped call, and a client that
has finished (or whose batch has another shape, e.g. its last, smaller batch of an epoch) is left out of that
call: its weights and optimizer state are gathered and scattered back by index, never padded, so no sample is
dropped or repeated. All clients start together, so every active client is at the same optimizer step.

Speed depends on the device and model: studies/speed/README.md (CPU: 0.76-0.79x the sequential loop for
an MLP since that loop got faster, 0.8-1.05x for the BN CNN, whose convs vmap turns into grouped convs of the
same arithmetic); on a GPU, ``benchmarks/gpu.py``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from fedaug.api import ClientContext, ClientData, ClientUpdate, Method, Payload, TrainSettings
from fedaug.errors import ConfigError
from fedaug.runtime.device import host_to_device
from fedaug.training.client import HookedClient, trains_through_hooks
from fedaug.training.flat_state import flatten
from fedaug.training.loop import (
    BatchableLoss,
    BatchTransform,
    LossOutput,
    as_batchable,
    batch_indices,
    check_finite_values,
    load_weights,
)
from fedaug.training.step_graphs import unrepeated_settings
from fedaug.types import Metrics, StateDict

Stacked = dict[str, Tensor]
ClientsTrainer = Callable[
    [nn.Module, Sequence["_Client"], TrainSettings], tuple[list[StateDict], list[Metrics]]
]
"""Trains copies of a model's weights, one per client, at once: :func:`train_clients` and its variants."""


def batching_refusal(method: Method, payload: Payload, ctx: ClientContext) -> str | None:
    """Why ``method`` cannot train this round's clients batched (None: it can)."""
    settings = payload.train
    problems = []
    if not trains_through_hooks(method):
        problems.append(f"method {method.name!r} has a client step of its own")
    elif isinstance(method, HookedClient) and as_batchable(method.loss_fn(payload, ctx)) is None:
        problems.append(f"method {method.name!r} has a loss hook that is not a BatchableLoss")
    if settings.optimizer not in ("adam", "sgd"):
        problems.append(f"optimizer {settings.optimizer!r}")
    return "; ".join(problems + unrepeated_settings(ctx.model, settings)) or None


def conv_model_note(model: nn.Module) -> str | None:
    """A warning for batched clients of a model with conv layers on a CPU (measured no faster), else None."""
    convs = sum(isinstance(m, nn.modules.conv._ConvNd) for m in model.modules())
    if convs == 0:
        return None
    return (
        f"engine.batched_clients on a model with {convs} conv layers on the CPU: vmap turns each conv into a "
        "grouped conv of the same arithmetic, and batched training of the BN CNN was measured 0.8-1.05x the "
        "sequential speed there (studies/speed/README.md); the results are the same either way"
    )


def train_round_batched(
    method: Method,
    payload: Payload,
    contexts: Sequence[ClientContext],
    trainer: ClientsTrainer | None = None,
    clients: Sequence[_Client] | None = None,
) -> list[ClientUpdate]:
    """The round's client updates, trained at once (same order as ``contexts``) by ``trainer`` (default
    :func:`train_clients`; :mod:`fedaug.engine.batched.modes` names the others), on ``clients`` (default
    :func:`round_clients`).

    Raises:
        ConfigError: naming why, if :func:`batching_refusal` refuses the method or settings.
    """
    if not contexts:
        return []
    if (reason := batching_refusal(method, payload, contexts[0])) is not None:
        raise ConfigError(
            "engine.batched_clients trains methods whose client step is a loss hook, with adam or sgd in "
            f"float32; not: {reason}"
        )
    assert isinstance(method, HookedClient)
    clients = round_clients(method, payload, contexts) if clients is None else clients
    load_weights(contexts[0].model, payload.model_state)
    states, metrics = (trainer or train_clients)(contexts[0].model, clients, payload.train)
    updates = []
    for c, state, metric in zip(clients, states, metrics, strict=True):
        update = ClientUpdate(c.ctx.client_id, c.ctx.data.num_examples, state, metric)
        updates.append(replace(update, client_state=method.kept_state(update)))
    return updates


def round_clients(method: Method, payload: Payload, contexts: Sequence[ClientContext]) -> list[_Client]:
    """The round's clients as batched training takes them: context, training data, loss hook, transform
    (for a method :func:`batching_refusal` accepts)."""
    assert isinstance(method, HookedClient)
    clients = []
    for ctx in contexts:
        loss = as_batchable(method.loss_fn(payload, ctx))
        assert loss is not None
        data = method.training_data(payload, ctx)
        clients.append(_Client(ctx, data, loss, method.batch_transform(payload, ctx)))
    return clients


@dataclass
class _Client:
    """One client of a batched round: its context, objective and optional batch transform."""

    ctx: ClientContext
    data: ClientData  # what it trains on (the method's training_data)
    loss: BatchableLoss
    transform: BatchTransform | None

    def batches(self, settings: TrainSettings) -> Iterator[tuple[Tensor, Tensor, Stacked]]:
        """This client's steps, as :func:`~fedaug.training.loop.train_local` makes them: the batch order of
        each epoch, the transform and the loss's draws, all from this client's streams in the same order."""
        data, generator = self.data, self.ctx.generator
        for _ in range(settings.local_epochs):
            order = host_to_device(torch.randperm(data.num_examples, generator=generator), data.x.device)
            for idx in batch_indices(order, settings.batch_size):
                x, y = data.x[idx], data.y[idx]
                if self.transform is not None:
                    x, y = self.transform(x, y, generator)
                step = self.loss.draws(x.shape[0]) if self.loss.draws is not None else {}
                yield x, y, step


def train_clients(
    model: nn.Module, clients: Sequence[_Client], settings: TrainSettings
) -> tuple[list[StateDict], list[Metrics]]:
    """Trains copies of ``model``'s current weights, one per client, at once.

    Returns:
        Per client, its final state dict (``model.state_dict()`` keys) and the metrics of ``train_local``.
    """
    model.train()
    count = len(clients)
    device = clients[0].data.x.device
    trainable = {k: v for k, v in model.named_parameters() if v.requires_grad}
    params = FlatRows(trainable, count)
    # Buffers stay one contiguous stack each: under vmap, batch norm silently leaves running statistics that
    # are views into a wider tensor (not contiguous) un-updated (torch 2.13), so they cannot be FlatRows.
    rest = {k: _stack(v, count) for k, v in model.named_parameters() if not v.requires_grad}
    rest.update({k: _stack(v, count) for k, v in model.named_buffers()})
    client_inputs = {k: torch.stack([c.loss.client[k] for c in clients]) for k in clients[0].loss.client}
    optimizer = FunctionalOptimizer(settings, params)
    objective = _Objective(model, clients[0].loss)

    def loss(p: Stacked, r: Stacked, x: Tensor, y: Tensor, client: Stacked, step: Stacked) -> Any:
        out = functional_call(objective, _prefixed({**p, **r}), (x, y, client, step))
        return out.loss, (out.loss.detach(), out.logs)

    step_fn = vmap(grad(loss, has_aux=True), randomness="error")
    streams = [c.batches(settings) for c in clients]
    sums: dict[str, Tensor] = {}
    recorded: list[tuple[list[int], Tensor]] = []  # (clients, their losses) of every stacked call
    num_steps = [0] * count
    active = list(range(count))
    while active:
        batches = {c: b for c in active if (b := next(streams[c], None)) is not None}
        active = list(batches)
        if not active:
            break
        optimizer.step_num += 1  # every active client is at the same step
        groups: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        for c, (x, y, _) in batches.items():
            groups[(x.shape, y.shape, x.dtype, y.dtype)].append(c)
        for members in groups.values():
            index = None if len(members) == count else host_to_device(torch.tensor(members), device)
            flat = params.take(index)
            r = _take(rest, index)
            x = torch.stack([batches[c][0] for c in members])
            y = torch.stack([batches[c][1] for c in members])
            step = {k: torch.stack([batches[c][2][k] for c in members]) for k in batches[members[0]][2]}
            grads, (value, logs) = step_fn(params.views(flat), r, x, y, _take(client_inputs, index), step)
            optimizer.step(flat, params.flatten(grads), index)
            if index is not None:  # the gathered copies were updated: write them back
                params.put(flat, index)
                _put(rest, r, index)
            for name, part in {"loss": value, **logs}.items():
                total = sums.setdefault(name, torch.zeros(count, dtype=part.dtype, device=device))
                if index is None:
                    total += part
                else:
                    total.index_add_(0, index, part)
            recorded.append((members, value))
            for c in members:
                num_steps[c] += 1
    _check_finite(recorded, count)
    stacked = {**params.views(params.rows), **rest}
    states = [{k: stacked[k][c].clone() for k in model.state_dict()} for c in range(count)]
    names = list(sums)
    table = torch.stack([sums[n].double() for n in names]).T.tolist() if names else [[]] * count
    metrics = []
    for c in range(count):
        row = {f"train/{n}": total / max(num_steps[c], 1) for n, total in zip(names, table[c], strict=True)}
        row["train/steps"] = float(num_steps[c])
        metrics.append(row)
    return states, metrics


def _check_finite(recorded: list[tuple[list[int], Tensor]], count: int) -> None:
    """:func:`~fedaug.training.loop.check_finite_values` for each client, with one read from the device."""
    if not recorded:
        return
    flat = iter(torch.cat([values for _, values in recorded]).float().tolist())
    per_client: list[list[float]] = [[] for _ in range(count)]
    for members, _ in recorded:
        for c in members:
            per_client[c].append(next(flat))
    for losses in per_client:
        check_finite_values(losses)


class _Objective(nn.Module):
    """The model plus a client's objective: ``functional_call`` on it swaps the model's parameters for one
    client's, so everything the objective reads of the model (its forward, ``encode``/``decode``, its
    parameters for a proximal term) sees that client's weights."""

    def __init__(self, model: nn.Module, loss: BatchableLoss) -> None:
        super().__init__()
        self.model = model
        self.fn = loss.fn

    def forward(self, x: Tensor, y: Tensor, client: Stacked, step: Stacked) -> LossOutput:
        return self.fn(self.model, x, y, client, step)


def _prefixed(tensors: Stacked) -> Stacked:
    return {f"model.{k}": v for k, v in tensors.items()}


def _stack(value: Tensor, count: int) -> Tensor:
    return value.detach().unsqueeze(0).repeat(count, *[1] * value.dim()).contiguous()


def _take(stacked: Stacked, index: Tensor | None) -> Stacked:
    """The rows of ``index`` (copies), or the stacked tensors themselves when every client takes part."""
    return stacked if index is None else {k: v.index_select(0, index) for k, v in stacked.items()}


def _put(stacked: Stacked, rows: Stacked, index: Tensor) -> None:
    for key, value in rows.items():
        stacked[key].index_copy_(0, index, value)


class FlatRows:
    """Stacked trainable weights as one ``[clients, P]`` tensor (``rows``): gathering, scattering and the
    optimizer's update then cost one operation each for all weights, not one per tensor (on a GPU each is a
    launch), while the model sees per-tensor views shaped ``[clients, *shape]``."""

    def __init__(self, named: Mapping[str, Tensor], count: int) -> None:
        dtypes = {v.dtype for v in named.values()}
        if len(dtypes) > 1:
            raise ConfigError(
                f"engine.batched_clients needs trainable weights of one dtype, got {sorted(map(str, dtypes))}"
            )
        self.shapes = {k: v.shape for k, v in named.items()}
        self.rows = flatten(named, list(named)).unsqueeze(0).repeat(count, 1)

    def take(self, index: Tensor | None) -> Tensor:
        """The rows of ``index`` (a copy), or all rows themselves when every client takes part."""
        return self.rows if index is None else self.rows.index_select(0, index)

    def put(self, rows: Tensor, index: Tensor) -> None:
        self.rows.index_copy_(0, index, rows)

    def views(self, rows: Tensor) -> Stacked:
        """Per-tensor views of ``rows`` (``[k, P]``), each ``[k, *shape]``."""
        parts = rows.split_with_sizes([s.numel() for s in self.shapes.values()], dim=1)
        shapes = self.shapes.items()
        return {k: part.view(rows.shape[0], *shape) for (k, shape), part in zip(shapes, parts, strict=True)}

    def flatten(self, tensors: Stacked) -> Tensor:
        """Per-tensor ``[k, *shape]`` (gradients) laid out as :meth:`views` reads them: ``[k, P]``."""
        return torch.cat([tensors[k].reshape(tensors[k].shape[0], -1) for k in self.shapes], dim=1)


class FunctionalOptimizer:
    """``torch.optim.Adam`` / ``SGD`` (single-tensor path, fresh state) on the flat rows of :class:`FlatRows`.

    Elementwise, so one update of all weights computes what ``torch.optim`` computes tensor by tensor.
    ``step_num`` is advanced by the caller once per step of the round (every client taking part in a step is
    at that step); :meth:`step` updates the rows ``index`` of the state (all rows when None).
    """

    def __init__(self, settings: TrainSettings, params: FlatRows) -> None:
        self.settings = settings
        self.step_num = 0
        self.first = torch.zeros_like(params.rows)
        self.second = torch.zeros_like(params.rows)

    @torch.no_grad()
    def step(self, param: Tensor, grad: Tensor, index: Tensor | None = None) -> None:
        """Updates ``param`` (the rows ``index`` of the weights, ``[k, P]``) in place with ``grad``."""
        s = self.settings
        g = grad.add(param, alpha=s.weight_decay) if s.weight_decay != 0 else grad
        first, second = self.first, self.second
        if index is not None:
            first, second = first.index_select(0, index), second.index_select(0, index)
        if s.optimizer == "adam":
            beta1, beta2, eps = 0.9, 0.999, 1e-8  # torch.optim.Adam defaults, as make_optimizer uses
            first.lerp_(g, 1 - beta1)
            second.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            step_size = s.lr / (1 - beta1**self.step_num)
            denom = (second.sqrt() / (1 - beta2**self.step_num) ** 0.5).add_(eps)
            param.addcdiv_(first, denom, value=-step_size)
        elif s.momentum != 0:
            first.copy_(g) if self.step_num == 1 else first.mul_(s.momentum).add_(g)
            param.add_(first, alpha=-s.lr)
        else:
            param.add_(g, alpha=-s.lr)
        if index is not None:
            self.first.index_copy_(0, index, first)
            self.second.index_copy_(0, index, second)
