"""Batched clients (``engine.batched_clients``): a round's clients trained at once with stacked weights.

For small models one local step is mostly fixed per-step cost (Python, dispatch, one optimizer call per
tensor), not arithmetic. This module stacks the weights, buffers and optimizer state of the round's clients
along a new leading axis and runs one ``torch.func.vmap(torch.func.grad(...))`` of a
``torch.func.functional_call`` per step for all of them, followed by one functional Adam/SGD update of the
stacked tensors. BatchNorm is handled functionally: the running statistics are stacked buffers that the
vmapped batch norm updates in place per client, exactly as in the sequential loop.

Why not :func:`fedaug.local_training.train_local`: that loop owns one stateful module and one
``torch.optim`` optimizer and steps them client after client; stacking needs parameters as plain tensors
(``functional_call``), gradients from ``torch.func.grad`` instead of ``backward`` and an optimizer written as
tensor arithmetic on stacked state, so the step itself cannot be shared. Everything around it is reused: the
batch schedule (:func:`~fedaug.local_training.batch_indices`, one ``randperm`` per epoch drawn from each
client's own generator, so every client sees the same batches as sequentially), the objective
(:func:`~fedaug.local_training.cross_entropy_loss`) and the reported metrics (``train/loss``, ``train/ce``,
``train/steps``). The functional optimizers repeat ``torch.optim.Adam`` / ``SGD`` (single-tensor CPU path)
operation by operation; results equal the sequential loop to float rounding (tested to 1e-10 in float64 over
30 steps per client and to 1e-5 in float32 over short runs; over long float32 runs both paths drift from the
float64 result by the same amount, see benchmarks/batched_drift.py).

Restrictions (anything else is refused with a ConfigError naming the reason):

* the method trains with plain cross-entropy and no batch transform (FedAvg, or a subclass that changes
  neither ``loss_fn``, ``batch_transform`` nor ``client_update``);
* optimizer ``adam`` or ``sgd`` without ``reset_optimizer_every_step``; ``engine.precision: float32``;
* models without randomness in the forward pass (no dropout): vmap runs with ``randomness="error"``.

Clients are batched together when they have the same number of examples (the same batch schedule, e.g. the
shard partition); clients with a size of their own form a group of one, which is correct but gains nothing.
Whether batching is faster depends on the model: see docs/results/speed/README.md (1.2-1.6x for an MLP on
two CPUs; for conv nets vmap turns each conv into a grouped conv of the same arithmetic, so there is little to
gain, and the BN CNN was 0.8x).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from fedaug.api import ClientContext, ClientData, ClientUpdate, Method, Payload, TrainSettings
from fedaug.errors import ConfigError
from fedaug.local_training import batch_indices, cross_entropy_loss
from fedaug.types import Metrics, StateDict

Stacked = dict[str, Tensor]


def check_batchable(method: Method, payload: Payload, ctx: ClientContext) -> None:
    """Raises ConfigError unless ``method`` trains with plain CE in a setting this module reproduces."""
    from fedaug.methods.fedavg import FedAvg  # the engine may not depend on methods at import time

    settings = payload.train
    problems = []
    if not isinstance(method, FedAvg) or type(method).client_update is not FedAvg.client_update:
        problems.append(f"method {method.name!r} has its own client update")
    elif method.loss_fn(payload, ctx) is not cross_entropy_loss:
        problems.append(f"method {method.name!r} changes the loss")
    elif method.batch_transform(payload, ctx) is not None:
        problems.append(f"method {method.name!r} transforms batches")
    if settings.optimizer not in ("adam", "sgd"):
        problems.append(f"optimizer {settings.optimizer!r}")
    if settings.reset_optimizer_every_step:
        problems.append("train.reset_optimizer_every_step")
    if settings.batchnorm_eval:
        problems.append("BatchNorm in eval mode while training")
    if settings.precision != "float32":
        problems.append(f"engine.precision={settings.precision}")
    if problems:
        raise ConfigError(
            "engine.batched_clients supports plain cross-entropy training (fedavg) with adam or sgd in "
            f"float32; not: {'; '.join(problems)}"
        )


def conv_model_note(model: nn.Module) -> str | None:
    """A warning for batched clients on a model with conv layers (measured no faster), else None."""
    convs = sum(isinstance(m, nn.modules.conv._ConvNd) for m in model.modules())
    if convs == 0:
        return None
    return (
        f"engine.batched_clients on a model with {convs} conv layers: vmap turns each conv into a grouped "
        "conv of the same arithmetic, and batched training of the BN CNN was measured 0.8-1.05x the "
        "sequential speed (docs/results/speed/README.md); the results are the same either way"
    )


def train_round_batched(
    method: Method, payload: Payload, contexts: Sequence[ClientContext]
) -> list[ClientUpdate]:
    """The round's client updates, trained in groups of equal local size (same order as ``contexts``)."""
    if not contexts:
        return []
    check_batchable(method, payload, contexts[0])
    model = contexts[0].model
    model.load_state_dict(payload.model_state)
    groups: dict[int, list[int]] = defaultdict(list)
    for position, ctx in enumerate(contexts):
        groups[ctx.data.num_examples].append(position)
    updates: dict[int, ClientUpdate] = {}
    for positions in groups.values():
        group = [contexts[p] for p in positions]
        states, metrics = train_group(
            model, [c.data for c in group], payload.train, [c.generator for c in group]
        )
        for p, ctx, state, metric in zip(positions, group, states, metrics, strict=True):
            updates[p] = ClientUpdate(ctx.client_id, ctx.data.num_examples, state, metric)
    return [updates[p] for p in range(len(contexts))]


def train_group(
    model: nn.Module,
    datas: Sequence[ClientData],
    settings: TrainSettings,
    generators: Sequence[torch.Generator],
) -> tuple[list[StateDict], list[Metrics]]:
    """Trains copies of ``model``'s current weights on each of ``datas`` (all of one size) at once.

    Returns:
        Per client, its final state dict (``model.state_dict()`` keys) and the metrics of ``train_local``.
    """
    size = datas[0].num_examples
    if any(d.num_examples != size for d in datas):
        raise ValueError("train_group needs clients of equal local size")
    model.train()
    count = len(datas)
    params = {k: _stack(v, count) for k, v in model.named_parameters() if v.requires_grad}
    frozen = {k: _stack(v, count) for k, v in model.named_parameters() if not v.requires_grad}
    buffers = {k: _stack(v, count) for k, v in model.named_buffers()}
    optimizer = FunctionalOptimizer(settings, params)

    functional = _Functional(model)

    def loss(p: Stacked, rest: Stacked, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        functional.tensors = {**p, **rest}
        out = cross_entropy_loss(functional, x, y)
        return out.loss, out.loss.detach()

    step = vmap(grad(loss, has_aux=True), randomness="error")
    losses = torch.zeros(count)
    num_steps = 0
    for _ in range(settings.local_epochs):
        orders = [torch.randperm(size, generator=g) for g in generators]
        schedules = [list(batch_indices(o, settings.batch_size)) for o in orders]
        for batch in zip(*schedules, strict=True):
            x = torch.stack([d.x[i] for d, i in zip(datas, batch, strict=True)])
            y = torch.stack([d.y[i] for d, i in zip(datas, batch, strict=True)])
            try:
                grads, value = step(params, {**frozen, **buffers}, x, y)
            except RuntimeError as exc:
                if "random" not in str(exc):
                    raise
                raise ConfigError(
                    "engine.batched_clients needs a model without randomness in its forward pass (dropout)"
                ) from exc
            optimizer.step(params, grads)
            losses += value
            num_steps += 1
    stacked = {**params, **frozen, **buffers}
    states = [{k: stacked[k][c].clone() for k in model.state_dict()} for c in range(count)]
    metrics = []
    for c in range(count):
        mean = float(losses[c]) / max(num_steps, 1)
        metrics.append({"train/ce": mean, "train/loss": mean, "train/steps": float(num_steps)})
    return states, metrics


def _stack(value: Tensor, count: int) -> Tensor:
    return value.detach().unsqueeze(0).repeat(count, *[1] * value.dim()).contiguous()


class _Functional(nn.Module):
    """Runs ``model`` with ``tensors`` in place of its parameters and buffers (the model a loss_fn sees)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self._target = [model]  # a list, so that the model is not registered as a submodule
        self.tensors: dict[str, Tensor] = {}

    def forward(self, x: Tensor) -> Any:
        return functional_call(self._target[0], self.tensors, (x,))


class FunctionalOptimizer:
    """``torch.optim.Adam`` / ``SGD`` (single-tensor CPU path, fresh state) on stacked parameters."""

    def __init__(self, settings: TrainSettings, params: Stacked) -> None:
        self.settings = settings
        self.step_num = 0
        self.state = {k: (torch.zeros_like(v), torch.zeros_like(v)) for k, v in params.items()}

    @torch.no_grad()
    def step(self, params: Stacked, grads: Stacked) -> None:
        s = self.settings
        self.step_num += 1
        for key, param in params.items():
            g = grads[key]
            if s.weight_decay != 0:
                g = g.add(param, alpha=s.weight_decay)
            first, second = self.state[key]
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
