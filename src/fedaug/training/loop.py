"""THE local training loop. Every method trains through :func:`train_local`; none writes its own loop.

A method customises local training with two hooks:

* ``loss_fn(model, x, y) -> LossOutput``: the objective of one mini-batch (plain CE for FedAvg; CE plus a
  proximal term for FedProx; FLea's mixed loss, which closes over its feature buffer and generator).
* ``batch_transform(x, y, generator) -> (x, y)``: an optional change of the batch before the loss
  (augmentation, mixing with shared averages).

The loop itself is the nanoGPT shape: batch, (transform), loss, zero_grad, backward, step. With
``engine.cuda_graphs`` (``TrainSettings.cuda_graphs``) the last four are one recorded step, replayed
(:mod:`fedaug.training.step_graphs`); the batch, its transform and the loss's draws stay here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from fedaug.api import ClientData, TrainSettings
from fedaug.errors import ConfigError
from fedaug.runtime.choices import OPTIMIZERS as OPTIMIZERS
from fedaug.runtime.device import host_to_device
from fedaug.runtime.precision import autocast
from fedaug.training.flat_state import dtype_groups, flatten, unflatten
from fedaug.training.objective import BatchableLoss as BatchableLoss
from fedaug.training.objective import BatchTransform as BatchTransform
from fedaug.training.objective import ClientTensors as ClientTensors
from fedaug.training.objective import LossFn as LossFn
from fedaug.training.objective import LossOutput as LossOutput
from fedaug.training.objective import ObjectiveFn as ObjectiveFn
from fedaug.training.row_mask import mean_cross_entropy
from fedaug.training.step_graphs import StepGraphs, graph_refusal, graphs_for
from fedaug.types import Metrics, StateDict

logger = logging.getLogger(__name__)


def cross_entropy_loss(model: nn.Module, x: Tensor, y: Tensor) -> LossOutput:
    """Plain cross-entropy of ``model(x)`` against integer labels (FedAvg's objective)."""
    loss = mean_cross_entropy(model(x), y)
    return LossOutput(loss, {"ce": loss.detach()})


def _plain_cross_entropy(
    model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
) -> LossOutput:
    del client, step
    return cross_entropy_loss(model, x, y)


def as_batchable(loss: LossFn) -> BatchableLoss | None:
    """``loss`` as a :class:`BatchableLoss` (plain cross-entropy is one), or None if it cannot be stacked."""
    if isinstance(loss, BatchableLoss):
        return loss
    if loss is cross_entropy_loss:  # one function for every client and round
        return BatchableLoss(_plain_cross_entropy, rounds_key=(), masked=True)
    return None


def make_optimizer(params: list[nn.Parameter], settings: TrainSettings) -> torch.optim.Optimizer:
    """The local optimizer named by ``settings.optimizer``.

    On a CPU it runs its foreach implementation (torch picks it by itself only on a GPU): one call per
    operation over all the parameters instead of one per parameter, bit-identical to the per-parameter loop
    (``tests/unit/training/test_optimizer_foreach.py``) and 1.1x faster an Adam step on the CIFAR-10 BN-CNN
    and HARNet (``benchmarks/flea_round_cpu.py``).
    """
    foreach = cpu_foreach(params)
    if settings.optimizer == "adam":
        return torch.optim.Adam(params, lr=settings.lr, weight_decay=settings.weight_decay, foreach=foreach)
    if settings.optimizer == "sgd":
        return torch.optim.SGD(
            params,
            lr=settings.lr,
            momentum=settings.momentum,
            weight_decay=settings.weight_decay,
            foreach=foreach,
        )
    raise ConfigError(f"unknown optimizer {settings.optimizer!r}; valid choices: {', '.join(OPTIMIZERS)}")


def cpu_foreach(params: list[nn.Parameter]) -> bool | None:
    """``foreach`` for a torch optimizer of ``params``: True when they all live on the CPU, else None
    (torch's own choice: foreach on a GPU)."""
    return True if params and all(p.device.type == "cpu" for p in params) else None


def batch_indices(order: Tensor, batch_size: int) -> Iterator[Tensor]:
    """Consecutive mini-batches of ``order``; a trailing batch of one sample joins the previous batch.

    Batch norm cannot normalise a batch of one sample in training mode, so the last sample rides along with
    the previous batch instead of being dropped (every sample is seen once per epoch).
    """
    n = order.shape[0]
    starts = list(range(0, n, batch_size))
    if n > 1 and n - starts[-1] == 1 and len(starts) > 1:
        starts.pop()
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else n
        yield order[start:end]


def steps_per_epoch(num_examples: int, batch_size: int) -> int:
    """How many mini-batches :func:`batch_indices` makes of ``num_examples`` samples: one per started batch,
    less one when a trailing batch of one sample joins the previous one."""
    if num_examples <= 0:
        return 0
    steps = -(-num_examples // batch_size)
    trailing = num_examples - batch_size * (steps - 1)
    return steps - 1 if steps > 1 and trailing == 1 else steps


def train_local(
    model: nn.Module,
    data: ClientData,
    *,
    loss_fn: LossFn,
    settings: TrainSettings,
    generator: torch.Generator,
    batch_transform: BatchTransform | None = None,
    max_steps: int | None = None,
) -> Metrics:
    """Runs ``settings.local_epochs`` epochs of mini-batch training on ``data`` in place.

    Args:
        model: the model to train (already holding the starting weights).
        data: the client's local data.
        loss_fn: the mini-batch objective.
        settings: optimizer, lr, epochs, batch size and precision for this round.
        generator: source of the batch order (and of any randomness the hooks draw).
        batch_transform: optional change of each batch before the loss.
        max_steps: train for exactly this many steps instead of ``local_epochs`` epochs: as many epochs as
            they need, each in a fresh order, the last one cut short (the ``centralized`` reference run's
            step budget); None: ``local_epochs`` whole epochs.

    Returns:
        Mean of every logged loss part over steps as ``"train/<name>"``, plus ``"train/steps"``.
    """
    model.train()
    frozen = batchnorm_eval(model) if settings.batchnorm_eval else nullcontext()
    with frozen:
        params = [p for p in model.parameters() if p.requires_grad]
        graphed = recorded_steps(model, params, loss_fn, settings) if settings.cuda_graphs else None
        optimizer = make_optimizer(params, settings) if graphed is None else None
        sums: dict[str, Tensor] = {}
        step_losses: list[Tensor] = []
        num_steps = 0
        per_epoch = steps_per_epoch(data.num_examples, settings.batch_size)
        epochs = settings.local_epochs if max_steps is None else -(-max_steps // max(per_epoch, 1))
        for _ in range(epochs):
            # The batch order is drawn on the CPU (the same on every device) and moved to the data's device
            # once per epoch, without waiting for the GPU, so gathering a batch copies nothing from the host.
            order = host_to_device(torch.randperm(data.num_examples, generator=generator), data.x.device)
            for idx in batch_indices(order, settings.batch_size):
                if num_steps == max_steps:  # the budget's last epoch is cut short
                    break
                x, y = data.x[idx], data.y[idx]
                if batch_transform is not None:
                    x, y = batch_transform(x, y, generator)
                if graphed is not None:  # engine.cuda_graphs: its outputs are overwritten by the next replay
                    graphs, batchable = graphed
                    out = graphs.step(batchable, x, y)
                    step_losses.append(out.loss.detach().clone())
                else:
                    assert optimizer is not None  # made above whenever the steps are not recorded
                    if settings.reset_optimizer_every_step:  # official FLea code: Adam without memory
                        optimizer = make_optimizer(params, settings)
                    with autocast(model, settings.precision):  # float32: no context at all
                        out = loss_fn(model, x, y)
                    loss = out.loss if settings.precision == "float32" else out.loss.float()
                    step_losses.append(loss.detach())
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()  # type: ignore[no-untyped-call]
                    optimizer.step()
                for name, value in {"loss": out.loss.detach(), **out.logs}.items():
                    sums[name] = sums[name] + value if name in sums else value.clone()
                num_steps += 1
    names = list(sums)
    read: list[float] = []
    if num_steps:  # one read from the device per client: every step's loss (for the check) and the sums
        losses = torch.stack(step_losses).double()
        read = torch.cat([losses, torch.stack([sums[n].double() for n in names]).flatten()]).tolist()
    check_finite_values(read[:num_steps])
    totals = read[num_steps:]
    metrics = {f"train/{n}": total / max(num_steps, 1) for n, total in zip(names, totals, strict=True)}
    metrics["train/steps"] = float(num_steps)
    return metrics


_graph_refusals: set[str] = set()  # reasons already logged, once per process


def recorded_steps(
    model: nn.Module, params: list[nn.Parameter], loss_fn: LossFn, settings: TrainSettings
) -> tuple[StepGraphs, BatchableLoss] | None:
    """``engine.cuda_graphs``: the model's :class:`~fedaug.training.step_graphs.StepGraphs`, set up for this
    client,
    and the loss as a BatchableLoss; None (and the reason logged once) when the steps cannot be recorded."""
    batchable = as_batchable(loss_fn)
    reason = graph_refusal(model, batchable, settings)
    if reason is not None or batchable is None:
        if reason not in _graph_refusals:
            _graph_refusals.add(str(reason))
            # info, not a warning: graphs are on by default on a GPU, and such a client only trains eagerly
            logger.info("engine.cuda_graphs: training without CUDA graphs (%s)", reason)
        return None
    graphs = graphs_for(model, params, settings)
    graphs.start_client(batchable, settings)
    return graphs, batchable


def check_finite_values(step_losses: list[float]) -> None:
    """Raises FloatingPointError naming the first local step whose loss (read from the device) was NaN or
    infinite.

    Checked once per client, after its training, rather than before every step: reading a loss on the host
    waits for the GPU, which would serialise every step. A non-finite update would silently poison the global
    model for every later round, so the client fails instead of returning it.
    """
    for step, value in enumerate(step_losses, start=1):
        if not math.isfinite(value):
            raise FloatingPointError(
                f"non-finite training loss ({value}) at local step {step}: "
                "the model diverged (lower the lr or the method's loss weights)"
            )


def first_step_problem(model: nn.Module, x: Tensor, y: Tensor, settings: TrainSettings) -> str | None:
    """What goes non-finite when ``model`` takes one local step of plain cross-entropy on ``(x, y)`` with
    ``settings``' optimizer and lr (in place: give it a copy), or None: the loss before the step, a
    parameter after it, or the loss after it (the loss of the next step, where a run that overflows stops)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        return None
    model.train()
    optimizer = make_optimizer(params, settings)
    loss = cross_entropy_loss(model, x, y).loss
    if not torch.isfinite(loss):
        return f"the loss before the first step is {loss.item()}"
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # type: ignore[no-untyped-call]
    optimizer.step()
    bad = next((n for n, p in model.named_parameters() if not torch.isfinite(p).all()), None)
    if bad is not None:
        return f"the first step makes parameter {bad!r} non-finite"
    with torch.no_grad():
        after = cross_entropy_loss(model, x, y).loss
    return None if torch.isfinite(after) else f"the loss after the first step is {after.item()}"


@contextmanager
def batchnorm_eval(model: nn.Module) -> Iterator[None]:
    """BatchNorm layers of ``model`` in eval mode (running statistics used, not updated) inside the block;
    the other layers keep their mode, and every BN layer gets its own mode back afterwards."""
    layers = [m for m in model.modules() if isinstance(m, _BatchNorm)]
    modes = [m.training for m in layers]
    for m in layers:
        m.eval()
    try:
        yield
    finally:
        for m, mode in zip(layers, modes, strict=True):
            m.train(mode)


def snapshot_state(model: nn.Module) -> StateDict:
    """A detached copy of ``model.state_dict()`` that later training cannot change.

    The copy is one flat tensor per dtype and device, and the entries are views of it: one copy operation (on
    a GPU one launch) instead of one per tensor.
    """
    state = model.state_dict()
    copy: StateDict = {}
    for keys in dtype_groups(state):
        copy.update(unflatten(flatten(state, keys), keys, state))
    return {key: copy[key] for key in state}


def load_weights(model: nn.Module, state: Mapping[str, Tensor]) -> None:
    """``model.load_state_dict(state)`` for a state of the model's own entries, copied in one foreach call
    (on a GPU a few launches instead of one per tensor); any other state goes through ``load_state_dict``
    and its errors."""
    own = model.state_dict()
    if own.keys() != state.keys() or any(own[k].shape != state[k].shape for k in own):
        model.load_state_dict(state)
        return
    with torch.no_grad():
        torch._foreach_copy_([own[k] for k in own], [state[k] for k in own])
