"""Batched clients with static shapes: every step of a round is one call of one shape, which a GPU can record
as one CUDA graph and replay (:class:`PaddedStep`).

:mod:`fedaug.engine.batched` stacks the clients whose batches have the same shape at each step and leaves the
others out (a client's last, smaller batch of an epoch; a client that has finished), so a round is a sequence
of calls of varying shapes and client subsets: nothing a graph recorded once can replay. Here every step has
the same shapes instead: each client's batch is padded with zeros to the round's largest batch, with a mask
of its real samples, and a client that has finished takes part with an empty mask and is left unchanged.

Exactly the sequential loop, for plain cross-entropy (FedAvg's objective):

* the loss is the mean over a client's real samples (padded rows have weight 0, so no gradient);
* every training-mode BatchNorm computes its statistics over each client's real samples only, and updates
  its running statistics (unbiased variance over the real count) only for a client with a batch
  (:func:`masked_batchnorm`);
* the optimizer (:class:`MaskedOptimizer`: ``torch.optim.Adam`` / ``SGD`` as tensor arithmetic, with the
  step count and the learning rate as tensors, so nothing is baked into a recording) updates only the clients
  with a batch: weights, moments and step counts of the others are kept (``torch.where``).

No sample is dropped or repeated: each client's batches are made by the same schedule as the sequential
loop (``_Client.batches``). ``tests/unit/engine/test_padded.py`` checks equality with the sequential loop in
float64 (BatchNorm, Adam and SGD with momentum, clients of unequal sizes) and that every step is a call of the
same shapes. Other objectives (FedProx, FLea, ...) need their means taken over the mask too and are not
covered yet: :func:`train_clients_padded` refuses them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap
from torch.nn.modules.batchnorm import _BatchNorm

from fedaug.api import TrainSettings
from fedaug.engine.batched import FlatRows, Stacked, _Client, _stack
from fedaug.errors import ConfigError
from fedaug.local_training import _plain_cross_entropy, check_finite_values
from fedaug.models.batchnorm import batchnorm_forwards
from fedaug.types import Metrics, StateDict


def padded_refusal(clients: Sequence[_Client]) -> str | None:
    """Why these clients cannot train padded (None: they can): plain cross-entropy without a transform."""
    for c in clients:
        if c.loss.fn is not _plain_cross_entropy or c.transform is not None:
            return (
                f"client {c.ctx.client_id}: padded batches implement plain cross-entropy without a transform"
            )
    return None


def masked_batchnorm(model: nn.Module, mask: Tensor) -> contextlib.AbstractContextManager[None]:
    """Inside the block, every training-mode BatchNorm of ``model`` normalises with the statistics of the
    rows where ``mask`` (``[B]``, 0/1 in the input's dtype) is 1, and updates its running statistics from them
    (unbiased variance over the real count, as ``F.batch_norm``) only if there is at least one."""
    return batchnorm_forwards(model.modules(), lambda m: _MaskedForward(m, mask))


class _MaskedForward:
    def __init__(self, module: _BatchNorm, mask: Tensor) -> None:
        self.module = module
        self.mask = mask

    def __call__(self, x: Tensor) -> Tensor:
        m = self.module
        dims = [0, *range(2, x.dim())]
        shape = [1, -1, *[1] * (x.dim() - 2)]
        w = self.mask.view(-1, *[1] * (x.dim() - 1))
        per_row = x[0].numel() // x.shape[1]  # values per channel in one sample
        count = self.mask.sum() * per_row
        mean = (x * w).sum(dims) / count.clamp(min=1)
        centred = x - mean.view(shape)
        var = (centred * centred * w).sum(dims) / count.clamp(min=1)
        out = centred * torch.rsqrt(var + m.eps).view(shape)
        if m.weight is not None and m.bias is not None:
            out = out * m.weight.view(shape) + m.bias.view(shape)
        if m.track_running_stats and m.running_mean is not None and m.running_var is not None:
            assert m.momentum is not None, "padded batches implement BatchNorm with a momentum"
            real = count > 0
            with torch.no_grad():
                unbiased = var * count / (count - 1).clamp(min=1)
                new_mean = torch.lerp(m.running_mean, mean.detach(), m.momentum)
                new_var = torch.lerp(m.running_var, unbiased.detach(), m.momentum)
                m.running_mean.copy_(torch.where(real, new_mean, m.running_mean))
                m.running_var.copy_(torch.where(real, new_var, m.running_var))
                if m.num_batches_tracked is not None:
                    m.num_batches_tracked.add_(real.to(m.num_batches_tracked.dtype))
        return out


class _MaskedObjective(nn.Module):
    """Plain cross-entropy over the real rows of a padded batch, BatchNorm over them too."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor, y: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        with masked_batchnorm(self.model, mask):
            logits = self.model(x)
        per_sample = F.cross_entropy(logits, y, reduction="none")
        loss = (per_sample * mask).sum() / mask.sum().clamp(min=1)
        return loss, loss.detach()


class PaddedStep:
    """One step of every client at once, on static inputs: ``x`` ``[C, B, ...]``, ``y`` ``[C, B]``, ``mask``
    ``[C, B]`` and ``active`` ``[C]`` are filled in place (:meth:`fill`) and :meth:`run` computes the step
    from them and writes the weights, buffers and optimizer state in place. Same shapes every call and no read
    from the device: what ``torch.cuda.CUDAGraph`` can record once and replay (on a CPU it is called)."""

    def __init__(
        self, model: nn.Module, count: int, batch: int, like: Tensor, settings: TrainSettings
    ) -> None:
        trainable = {k: v for k, v in model.named_parameters() if v.requires_grad}
        self.params = FlatRows(trainable, count)
        self.rest = {k: _stack(v, count) for k, v in model.named_parameters() if not v.requires_grad}
        self.rest.update({k: _stack(v, count) for k, v in model.named_buffers()})
        self.optimizer = MaskedOptimizer(settings, self.params.rows)
        self.x = like.new_zeros((count, batch, *like.shape[1:]))
        self.y = torch.zeros(count, batch, dtype=torch.long, device=like.device)
        self.mask = like.new_zeros((count, batch))
        self.active = torch.zeros(count, dtype=torch.bool, device=like.device)
        self.loss = like.new_zeros(count)
        objective = _MaskedObjective(model)

        def loss(p: Stacked, r: Stacked, x: Tensor, y: Tensor, mask: Tensor) -> Any:
            named = {f"model.{k}": v for k, v in {**p, **r}.items()}
            return functional_call(objective, named, (x, y, mask))

        self.step_fn = vmap(grad(loss, has_aux=True), randomness="error")

    def fill(self, batches: dict[int, tuple[Tensor, Tensor]]) -> None:
        """Copies each client's batch (``{client: (x, y)}``) into the static inputs, zero-padded and masked;
        clients without a batch get an empty mask."""
        self.x.zero_()
        self.y.zero_()
        self.mask.zero_()
        self.active.zero_()
        for c, (x, y) in batches.items():
            n = x.shape[0]
            self.x[c, :n] = x
            self.y[c, :n] = y
            self.mask[c, :n] = 1
            self.active[c] = True

    def run(self) -> None:
        """The step: gradients of every client, then the optimizer on the active clients only."""
        rows = self.params.rows
        grads, value = self.step_fn(self.params.views(rows), self.rest, self.x, self.y, self.mask)
        self.optimizer.step(rows, self.params.flatten(grads), self.active)
        self.loss.copy_(value)


class MaskedOptimizer:
    """``torch.optim.Adam`` / ``SGD`` (fresh state, single-tensor path) on ``[clients, P]`` rows, updating
    only the active rows; per-row step counts and the learning rate are tensors (no host value to record)."""

    def __init__(self, settings: TrainSettings, rows: Tensor) -> None:
        self.settings = settings
        self.lr = torch.tensor(settings.lr, dtype=rows.dtype, device=rows.device)
        self.steps = rows.new_zeros((rows.shape[0], 1))
        self.first = torch.zeros_like(rows)
        self.second = torch.zeros_like(rows)

    @torch.no_grad()
    def step(self, param: Tensor, grad: Tensor, active: Tensor) -> None:
        """Updates the ``active`` rows (``[clients]`` bool) of ``param`` in place with ``grad``."""
        s, keep = self.settings, active[:, None]
        self.steps.add_(keep.to(self.steps.dtype))
        g = grad.add(param, alpha=s.weight_decay) if s.weight_decay != 0 else grad
        first, second = self.first, self.second
        if s.optimizer == "adam":
            beta1, beta2, eps = 0.9, 0.999, 1e-8  # torch.optim.Adam defaults, as make_optimizer uses
            new_first = first.lerp(g, 1 - beta1)
            new_second = second.mul(beta2).addcmul_(g, g, value=1 - beta2)
            steps = self.steps.clamp(min=1)
            step_size = self.lr / (1 - beta1**steps)
            denom = (new_second.sqrt() / (1 - beta2**steps).sqrt()).add_(eps)
            new = param - step_size * (new_first / denom)
            second.copy_(torch.where(keep, new_second, second))
        elif s.momentum != 0:
            new_first = torch.where(self.steps == 1, g, first * s.momentum + g)
            new = param - self.lr * new_first
        else:
            new_first, new = first, param - self.lr * g
        first.copy_(torch.where(keep, new_first, first))
        param.copy_(torch.where(keep, new, param))


def train_clients_padded(
    model: nn.Module, clients: Sequence[_Client], settings: TrainSettings
) -> tuple[list[StateDict], list[Metrics]]:
    """:func:`~fedaug.engine.batched.train_clients` with padded static shapes (module docstring).

    Raises:
        ConfigError: for clients :func:`padded_refusal` refuses.
    """
    if (reason := padded_refusal(clients)) is not None:
        raise ConfigError(reason)
    model.train()
    count = len(clients)
    schedules = [list(c.batches(settings)) for c in clients]  # the batches, as the sequential loop draws them
    batch = max(x.shape[0] for steps in schedules for x, _, _ in steps)
    step = PaddedStep(model, count, batch, clients[0].data.x, settings)
    losses: list[list[Tensor]] = [[] for _ in range(count)]
    for t in range(max(len(steps) for steps in schedules)):
        batches = {c: (steps[t][0], steps[t][1]) for c, steps in enumerate(schedules) if t < len(steps)}
        step.fill(batches)
        step.run()
        for c in batches:
            losses[c].append(step.loss[c].clone())
    read = [torch.stack(values).double().tolist() for values in losses]  # one read per client
    stacked = {**step.params.views(step.params.rows), **step.rest}
    states = [{k: stacked[k][c].clone() for k in model.state_dict()} for c in range(count)]
    metrics = []
    for values in read:
        check_finite_values(values)
        mean = sum(values) / max(len(values), 1)
        metrics.append({"train/loss": mean, "train/ce": mean, "train/steps": float(len(values))})
    return states, metrics
