"""Batched clients with static shapes: every step of a round is one call of one shape, which a GPU can record
as one CUDA graph and replay (:class:`PaddedStep`).

:mod:`fedaug.engine.batched.stacked` stacks the clients whose batches have the same shape at each step and
leaves the
others out (a client's last, smaller batch of an epoch; a client that has finished), so a round is a sequence
of calls of varying shapes and client subsets: nothing a graph recorded once can replay. Here every step has
the same shapes instead: each client's batch is padded with zeros to the round's largest batch, with a mask
of its real samples, and a client that has finished takes part with an empty mask and is left unchanged.

Exactly the sequential loop, for every loss hook that takes its batch means through
:mod:`fedaug.training.row_mask`
(``BatchableLoss.masked``: FedAvg's cross-entropy, hence also FedData, CCVR and Fed-ZDAS, whose clients train
with it; FedProx, FedDecorr, FedLC, FedRS, FedNTD, MOON, FedMix's default NaiveMix (its batch transform
applied to each client's batch before padding), FLea, ``flea_official`` and ``flea_eq6`` in every round):

* every mean over the batch in the objective is the mean over a client's real samples (padded rows have
  weight 0, so no gradient), and so are the pairwise means of FLea's distance correlation;
* every training-mode BatchNorm computes its statistics over each client's real samples only, and updates
  its running statistics (unbiased variance over the real count) only for a client with a batch
  (:func:`masked_batchnorm`);
* the optimizer (:class:`MaskedOptimizer`: ``torch.optim.Adam`` / ``SGD`` as tensor arithmetic, with the
  step count and the learning rate as tensors, so nothing is baked into a recording) updates only the clients
  with a batch: weights, moments and step counts of the others are kept (``torch.where``).

No sample is dropped or repeated: each client's batches are made by the same schedule as the sequential
loop (``_Client.batches``). ``tests/unit/engine/test_padded.py`` checks equality with the sequential loop in
float64 (BatchNorm, Adam and SGD with momentum, clients of unequal sizes) and that every step is a call of the
same shapes, for each covered method (``tests/unit/engine/test_padded_methods.py``). Hooks that are not masked
(FedMix's ``mafl`` mode, whose loss sums per-sample input gradients; the ``*_augmix`` variants) are refused
by :func:`padded_refusal`, and the engine trains them one by one, logging why.

Recorded: with ``engine.cuda_graphs`` on a CUDA device the step is recorded once (per workspace model, round
shape and hook, :meth:`PaddedStep.serves`) and replayed at every step of this and later rounds
(:mod:`fedaug.engine.batched.padded_graphs`); each round loads its weights into the same static tensors.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap
from torch.nn.modules.batchnorm import _BatchNorm

from fedaug.api import TrainSettings
from fedaug.engine.batched.padded_graphs import replay
from fedaug.engine.batched.stacked import FlatRows, Stacked, _Client, _stack
from fedaug.errors import ConfigError
from fedaug.models.batchnorm import batchnorm_forwards
from fedaug.runtime.device import host_to_device
from fedaug.training.flat_state import flatten
from fedaug.training.loop import BatchableLoss, LossOutput, ObjectiveFn, check_finite_values
from fedaug.training.objective import hook_code
from fedaug.training.row_mask import masked_rows
from fedaug.training.step_graphs import release_memory
from fedaug.types import Metrics, StateDict


def padded_refusal(clients: Sequence[_Client]) -> str | None:
    """Why these clients cannot train padded (None: they can): each needs a hook that takes its batch means
    over the real rows (``BatchableLoss.masked``). A batch transform is applied to each client's batch before
    it is padded, as in the sequential loop."""
    for c in clients:
        if not c.loss.masked:
            return (
                f"client {c.ctx.client_id}: padded batches train loss hooks whose batch means are masked "
                "(BatchableLoss.masked); this one's are not"
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
    """The model plus a client's objective on a padded batch: BatchNorm and every batch mean of the hook
    (:mod:`fedaug.training.row_mask`) over the rows where ``mask`` is 1."""

    def __init__(self, model: nn.Module, fn: ObjectiveFn) -> None:
        super().__init__()
        self.model = model
        self.fn = fn

    def forward(self, x: Tensor, y: Tensor, mask: Tensor, client: Stacked, step: Stacked) -> LossOutput:
        with masked_batchnorm(self.model, mask), masked_rows(mask):
            return self.fn(self.model, x, y, client, step)


@dataclass
class PaddedBatches:
    """A round's batches, padded: ``x`` ``[T, C, B, ...]``, ``y`` and ``mask`` ``[T, C, B]``, ``active``
    ``[T, C]`` (whether client c has a batch at step t) and the loss's draws ``step`` (each
    ``[T, C, B, ...]``), made with a few operations for the whole round: a step copies one slice of each."""

    x: Tensor
    y: Tensor
    mask: Tensor
    active: Tensor
    step: Stacked

    @classmethod
    def of(cls, schedules: Sequence[Sequence[tuple[Tensor, Tensor, Stacked]]]) -> PaddedBatches:
        """The padded batches of each client's ``(x, y, draws)`` steps (:meth:`_Client.batches`).

        Raises:
            ConfigError: for a draw whose first dimension is not its batch's size (it cannot be padded).
        """
        first = schedules[0][0]
        steps, count = max(map(len, schedules)), len(schedules)
        batch = max(x.shape[0] for s in schedules for x, _, _ in s)
        positions, active = [], torch.zeros(steps, count, dtype=torch.bool)
        for c, schedule in enumerate(schedules):
            for t, (x, _, draws) in enumerate(schedule):
                n = x.shape[0]
                bad = [k for k, v in draws.items() if v.shape[:1] != (n,)]
                if bad:
                    raise ConfigError(
                        f"padded batches need draws with one row per sample; {bad[0]!r} has not"
                    )
                positions.append(torch.arange(n) + (t * count + c) * batch)
                active[t, c] = True
        device = first[0].device
        index = host_to_device(torch.cat(positions), device)

        def place(parts: list[Tensor]) -> Tensor:
            out = parts[0].new_zeros((steps * count * batch, *parts[0].shape[1:]))
            out.index_copy_(0, index, torch.cat(parts))
            return out.view(steps, count, batch, *parts[0].shape[1:])

        rows = [row for s in schedules for row in s]
        ones = [first[0].new_ones(x.shape[0]) for x, _, _ in rows]
        draws = {k: place([d[k] for _, _, d in rows]) for k in first[2]}
        x, y = place([x for x, _, _ in rows]), place([y for _, y, _ in rows])
        return cls(x, y, place(ones), host_to_device(active, device), draws)

    @property
    def steps(self) -> int:
        return int(self.x.shape[0])

    def shapes(self) -> tuple[object, ...]:
        """Shapes and dtypes of one step's inputs: what a recorded step must match."""
        named = {"x": self.x, "y": self.y, "mask": self.mask, "active": self.active, **self.step}
        return tuple((k, tuple(v.shape[1:]), v.dtype) for k, v in named.items())


class PaddedStep:
    """One step of every client at once, on static inputs: ``x`` ``[C, B, ...]``, ``y``, ``mask`` ``[C, B]``,
    ``active`` ``[C]`` and the draws ``step`` are filled in place (:meth:`fill`), and :meth:`run` computes
    the step from them and writes the weights, buffers, optimizer state and ``outputs`` (``[1 + logs, C]``:
    the loss, then each logged part) in place. Same shapes every call and no read from the device: what
    ``torch.cuda.CUDAGraph`` can record once and replay (:mod:`fedaug.engine.batched.padded_graphs`); on a
    CPU it is
    called. It is kept with the workspace model and serves later rounds of the same shapes and hook
    (:meth:`serves`), loaded with their weights (:meth:`load`)."""

    def __init__(
        self,
        model: nn.Module,
        loss: BatchableLoss,
        client: Stacked,
        like: PaddedBatches,
        settings: TrainSettings,
    ) -> None:
        count = like.x.shape[1]
        self.fn, self.rounds_key, self.settings = loss.fn, loss.rounds_key, settings
        self.keys = list(model.state_dict())
        trainable = {k: v for k, v in model.named_parameters() if v.requires_grad}
        self.params = FlatRows(trainable, count)
        self.rest = {k: _stack(v, count) for k, v in model.named_parameters() if not v.requires_grad}
        self.rest.update({k: _stack(v, count) for k, v in model.named_buffers()})
        self.optimizer = MaskedOptimizer(settings, self.params.rows)
        self.x, self.y, self.mask = like.x[0].clone(), like.y[0].clone(), like.mask[0].clone()
        self.active, self.step = like.active[0].clone(), {k: v[0].clone() for k, v in like.step.items()}
        self.client = {k: v.clone() for k, v in client.items()}
        self.outputs: Tensor | None = None
        self.names: list[str] = []
        self.graph: Any = None  # the recorded step (padded_graphs), once recorded
        objective = _MaskedObjective(model, loss.fn)

        def objective_of(p: Stacked, r: Stacked, *inputs: Any) -> Any:
            named = {f"model.{k}": v for k, v in {**p, **r}.items()}
            out = functional_call(objective, named, inputs)
            return out.loss, (out.loss.detach(), out.logs)

        self.step_fn = vmap(grad(objective_of, has_aux=True), randomness="error")

    def serves(self, loss: BatchableLoss, client: Stacked, settings: TrainSettings) -> bool:
        """Whether this step computes ``loss``'s round (on inputs of its shapes): the same client shapes,
        optimizer constants, and hook (the same function, or a closure of its code with an equal
        ``rounds_key``: by the BatchableLoss contract, what differs reaches it as the ``client`` tensors)."""
        same_fn = loss.fn is self.fn or (
            hook_code(loss.fn) is hook_code(self.fn)
            and hook_code(loss.fn) is not loss.fn
            and loss.rounds_key is not None
            and loss.rounds_key == self.rounds_key
        )
        constants = [(s.optimizer, s.weight_decay, s.momentum) for s in (settings, self.settings)]
        client_shapes = [{k: (v.shape, v.dtype) for k, v in c.items()} for c in (client, self.client)]
        return same_fn and constants[0] == constants[1] and client_shapes[0] == client_shapes[1]

    def load(self, model: nn.Module, client: Stacked, settings: TrainSettings) -> None:
        """Every client starts from ``model``'s weights and buffers with a fresh optimizer at this round's lr;
        ``client`` (stacked) is the round's client tensors."""
        with torch.no_grad():
            trainable = {k: v for k, v in model.named_parameters() if v.requires_grad}
            self.params.rows.copy_(flatten(trainable, list(trainable)).expand_as(self.params.rows))
            named = {**dict(model.named_parameters()), **dict(model.named_buffers())}
            for k, stacked in self.rest.items():
                stacked.copy_(named[k].detach().expand_as(stacked))
            for k, value in client.items():
                self.client[k].copy_(value)
        self.optimizer.reset(settings.lr)

    def fill(self, batches: PaddedBatches, t: int) -> None:
        """Copies step ``t`` of ``batches`` into the static inputs."""
        for static, value in ((self.x, batches.x), (self.y, batches.y), (self.mask, batches.mask)):
            static.copy_(value[t])
        self.active.copy_(batches.active[t])
        for k, value in batches.step.items():
            self.step[k].copy_(value[t])

    def run(self) -> None:
        """The step: gradients of every client, then the optimizer on the active clients only."""
        rows = self.params.rows
        inputs = (self.x, self.y, self.mask, self.client, self.step)
        grads, (value, logs) = self.step_fn(self.params.views(rows), self.rest, *inputs)
        self.optimizer.step(rows, self.params.flatten(grads), self.active)
        outputs = torch.stack([value, *logs.values()])
        if self.outputs is None:  # the first call is eager (a warm-up before any recording)
            self.names = ["loss", *logs]
            self.outputs = outputs
        else:
            self.outputs.copy_(outputs)

    def mutable(self) -> list[Tensor]:
        """Everything :meth:`run` writes: weights, buffers, optimizer state, outputs."""
        state = [self.optimizer.first, self.optimizer.second, self.optimizer.steps]
        return [
            self.params.rows,
            *self.rest.values(),
            *state,
            *([self.outputs] if self.outputs is not None else []),
        ]

    def states(self) -> list[StateDict]:
        """Each client's state dict, as trained."""
        stacked = {**self.params.views(self.params.rows), **self.rest}
        return [{k: stacked[k][c].clone() for k in self.keys} for c in range(self.x.shape[0])]


class MaskedOptimizer:
    """``torch.optim.Adam`` / ``SGD`` (fresh state, single-tensor path) on ``[clients, P]`` rows, updating
    only the active rows; per-row step counts and the learning rate are tensors (no host value to record).

    The step counts, the learning rate and Adam's bias corrections are float64 whatever the rows' dtype, as
    ``torch.optim`` computes them in Python floats: in float32, ``1 - 0.999 ** step`` loses about 1.3e-5 of
    its value to cancellation, which made every float32 Adam update about 7e-6 (relative) larger than
    ``torch.optim``'s, a coherent error about 100 times float32's rounding that training then amplified
    (``benchmarks/batched_drift.py``; docs/guide/gpu.md)."""

    def __init__(self, settings: TrainSettings, rows: Tensor) -> None:
        self.settings = settings
        self.lr = torch.tensor(settings.lr, dtype=torch.float64, device=rows.device)
        self.steps = torch.zeros((rows.shape[0], 1), dtype=torch.float64, device=rows.device)
        self.first = torch.zeros_like(rows)
        self.second = torch.zeros_like(rows)

    @torch.no_grad()
    def reset(self, lr: float) -> None:
        """A fresh optimizer (zero moments and step counts) at learning rate ``lr``."""
        for state in (self.steps, self.first, self.second):
            state.zero_()
        self.lr.fill_(lr)

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
            step_size = (self.lr / (1 - beta1**steps)).to(param.dtype)  # float64 -> the rows' dtype, as
            correction = (1 - beta2**steps).sqrt().to(param.dtype)  # torch.optim's Python floats are
            denom = (new_second.sqrt() / correction).add_(eps)
            new = param - step_size * (new_first / denom)
            second.copy_(torch.where(keep, new_second, second))
        elif s.momentum != 0:
            new_first = torch.where(self.steps == 1, g, first * s.momentum + g)
            new = param - self.lr.to(param.dtype) * new_first
        else:
            new_first, new = first, param - self.lr.to(param.dtype) * g
        first.copy_(torch.where(keep, new_first, first))
        param.copy_(torch.where(keep, new, param))


_STEPS: weakref.WeakKeyDictionary[nn.Module, dict[tuple[object, ...], PaddedStep]] = (
    weakref.WeakKeyDictionary()
)
"""Each workspace model's steps by input shapes (:meth:`PaddedBatches.shapes`), all of one hook."""


def train_clients_padded(
    model: nn.Module, clients: Sequence[_Client], settings: TrainSettings
) -> tuple[list[StateDict], list[Metrics]]:
    """:func:`~fedaug.engine.batched.stacked.train_clients` with padded static shapes (module docstring); with
    ``settings.cuda_graphs`` on a CUDA device, the step is recorded once per round shape and hook and replayed
    (:func:`~fedaug.engine.batched.padded_graphs.replay`); the steps of each shape are kept for later rounds
    of the
    same hook (a round of the default preset pads to 32 or 33 rows: a batch of one joins the one before).

    Raises:
        ConfigError: for clients :func:`padded_refusal` refuses.
    """
    if (reason := padded_refusal(clients)) is not None:
        raise ConfigError(reason)
    model.train()
    batches = PaddedBatches.of([list(c.batches(settings)) for c in clients])  # the sequential loop's batches
    loss = clients[0].loss  # the first client's hook computes every client's (BatchableLoss contract)
    client = {k: torch.stack([c.loss.client[k] for c in clients]) for k in loss.client}
    kept = _STEPS.setdefault(model, {})
    if any(not s.serves(loss, client, settings) for s in kept.values()):  # another hook: drop them all
        recorded = any(s.graph is not None for s in kept.values())
        kept.clear()
        if recorded:
            release_memory()  # the dropped recordings' memory pools
    step = kept.get(batches.shapes())
    if step is None:
        step = kept[batches.shapes()] = PaddedStep(model, loss, client, batches, settings)
    step.load(model, client, settings)
    record = settings.cuda_graphs and batches.x.device.type == "cuda"
    outputs = []
    for t in range(batches.steps):
        step.fill(batches, t)
        replay(step) if record else step.run()
        assert step.outputs is not None
        outputs.append(step.outputs.clone())
    return step.states(), _metrics(step.names, torch.stack(outputs), batches.active)


def _metrics(names: list[str], outputs: Tensor, active: Tensor) -> list[Metrics]:
    """Each client's ``train_local`` metrics from the steps' ``outputs`` (``[T, parts, C]``) where it was
    ``active`` (``[T, C]``), with one read from the device; raises for a non-finite loss as it does."""
    taken = torch.where(active[:, None, :], outputs, torch.zeros_like(outputs))
    means = taken.sum(0) / active.sum(0).clamp(min=1)  # [parts, C]
    table = torch.cat([means.double().T, taken[:, 0].double().T, active.double().T], dim=1).tolist()
    parts, steps = len(names), outputs.shape[0]
    metrics = []
    for row in table:
        flags = row[parts + steps :]
        check_finite_values([v for v, on in zip(row[parts : parts + steps], flags, strict=True) if on])
        metric = {f"train/{n}": v for n, v in zip(names, row[:parts], strict=True)}
        metric["train/steps"] = float(sum(flags))
        metrics.append(metric)
    return metrics
