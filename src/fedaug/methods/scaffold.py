"""SCAFFOLD: client-drift correction with control variates (option II).

SCAFFOLD: Stochastic Controlled Averaging for Federated Learning. S. P. Karimireddy, S. Kale, M. Mohri,
S. J. Reddi, S. U. Stich, A. T. Suresh. ICML 2020. arXiv:1910.06378. Algorithm 1, option II.

The server holds a control variate ``c`` (an estimate of the global gradient) and client i its own ``c_i``
(an estimate of its local gradient; 0 before its first participation). Client i starts from the global
weights ``x`` and trains with every gradient corrected by ``c - c_i``: its loss is
``CE + sum_p <c - c_i, p>`` over the trainable parameters p, whose gradient is ``g + c - c_i``. After its
``K`` local steps at learning rate ``lr`` it sets (option II)::

    c_i+ = c_i - c + (x - y_i) / (K lr)

keeps ``c_i+`` for its next participation (engine-owned client state: checkpointed, so a resumed run is
identical) and sends ``y_i`` and ``Delta c_i = c_i+ - c_i``. The server moves
``x <- x + server_lr mean_i (y_i - x)`` (FedAvg's weighted mean when ``server_lr = 1``) and
``c <- c + sum_i (n_i / N) Delta c_i`` (N: the training samples of all clients). With zero control variates
(round 1) a client trains exactly as FedAvg's (tested); with one local SGD step per round and every client
participating, every client takes the same step ``x - lr grad f(x)`` from round 2 on, which is FedAvg's.

# Deviation from paper: the paper averages uniformly (1/|S| for x, 1/N clients for c); we weight by local data
# size (FedAvg's mean for x, n_i / N samples for c), so the fixed point is the minimiser of FedAvg's objective
# (the pooled data's loss) and server_lr = 1 is FedAvg's aggregation exactly.
# Deviation from paper: option II writes c_i+ through the displacement, (x - y_i) / (K lr), which is the mean
# of the K corrected gradients only under plain SGD (no momentum, no weight decay). By default
# (``control_update: mean_gradient``) we take that mean directly, from the gradients of the local steps:
# c_i+ = mean_k(g_k + c - c_i) - (c - c_i) = mean_k g_k, the same number under plain SGD (to float rounding,
# tested) and still a gradient estimate under Adam, the default local optimizer, where the displacement is
# Adam's normalised steps (about lr a coordinate whatever the gradient) and SCAFFOLD diverged (FSDD, Qua(3),
# K = 27: best 27.3% against FedAvg's 72-81%). ``control_update: displacement`` is the paper's formula as
# printed. The gradients are read by parameter hooks, so this form trains without recorded CUDA graphs.
# BN running statistics are averaged as FedAvg's (they get no control variate).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from fedaug.api import (
    ClientContext,
    ClientUpdate,
    MethodConfig,
    Payload,
    RunContext,
    ServerState,
    TrainSettings,
)
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.parts.aggregate import weighted_average
from fedaug.methods.parts.checks import check_choice, check_positive
from fedaug.methods.parts.payloads import read_extra
from fedaug.methods.parts.server_steps import apply_step, client_delta, local_steps, stepped_keys
from fedaug.registry import register
from fedaug.training.loop import BatchableLoss, ClientTensors, LossFn, LossOutput
from fedaug.training.row_mask import mean_cross_entropy
from fedaug.types import StateDict

CONTROL_KEY = "scaffold_c"
DELTA_KEY = "scaffold_delta_c"
CONTROL_UPDATES = ("mean_gradient", "displacement")


@dataclass(frozen=True)
class ScaffoldConfig(MethodConfig):
    """SCAFFOLD's hyper-parameter.

    Attributes:
        server_lr: global step size eta_g (> 0; default 1, the paper's experiments; 1 is FedAvg's mean).
        control_update: how c_i+ is formed: ``mean_gradient`` (default; the mean of the local steps'
            gradients, option II's value under plain SGD and sound under Adam) or ``displacement`` (option II
            as printed, (x - y_i) / (K lr) - (c - c_i); plain SGD only).
    """

    server_lr: float = 1.0
    control_update: str = "mean_gradient"

    def __post_init__(self) -> None:
        check_positive(self, ("server_lr",))
        check_choice("control_update", self.control_update, CONTROL_UPDATES)


def total_samples(run: RunContext, updates: Sequence[ClientUpdate]) -> float:
    """N, the training samples of all clients (``run.client_sizes``; where the run does not give them, the
    round's mean client size times the number of clients)."""
    if run.client_sizes:
        return float(sum(run.client_sizes))
    return sum(u.num_examples for u in updates) * run.num_clients / len(updates)


def correction_term(model: nn.Module, correction: Mapping[str, Tensor]) -> Tensor:
    """``sum_p <correction_p, p>`` over the named parameters that have a correction (its gradient is the
    correction)."""
    terms = [(p * correction[name]).sum() for name, p in model.named_parameters() if name in correction]
    return torch.stack(terms).sum()


@contextmanager
def gradient_sums(model: nn.Module, names: Sequence[str]) -> Iterator[StateDict]:
    """Inside the block, the sum of every backward's gradient of the named parameters (float64, zero at the
    start), read by parameter hooks that are removed afterwards."""
    params = dict(model.named_parameters())
    sums: StateDict = {name: torch.zeros_like(params[name], dtype=torch.float64) for name in names}

    def add_to(name: str) -> Any:
        def hook(grad: Tensor) -> None:
            sums[name].add_(grad.detach().to(torch.float64))

        return hook

    handles = [params[name].register_hook(add_to(name)) for name in names]  # type: ignore[no-untyped-call]
    try:
        yield sums
    finally:
        for handle in handles:
            handle.remove()


@register(
    "method",
    "scaffold",
    summary="FedAvg whose local gradients are corrected by server and client control variates",
    paper="Karimireddy et al., ICML 2020",
)
class Scaffold(FedAvg):
    """SCAFFOLD with option II control variates.

    Client: trains with ``CE + sum <c - c_i, w>`` (logs ``train/ce``), then returns ``Delta c_i`` in its
    update's ``extra`` and keeps ``c_i+`` as its client state. Server: FedAvg's mean (times ``server_lr``)
    for the weights; ``c`` in ``ServerState.extra``, broadcast in the payload's ``extra``.
    """

    name = "scaffold"
    config_cls = ScaffoldConfig
    config: ScaffoldConfig

    def init_server(self, model_state: StateDict, run: RunContext) -> ServerState:
        state = super().init_server(model_state, run)
        control = {key: torch.zeros_like(model_state[key]) for key in stepped_keys(model_state)}
        return replace(state, extra={**state.extra, CONTROL_KEY: control})

    def payload(self, state: ServerState, round_num: int, train: TrainSettings) -> Payload:
        payload = super().payload(state, round_num, train)
        return replace(payload, extra={**payload.extra, CONTROL_KEY: state.extra[CONTROL_KEY]})

    def _controls(self, payload: Payload, ctx: ClientContext) -> tuple[StateDict, StateDict]:
        """``(c, c_i)`` on the client's device, keyed by the trainable parameters' names."""
        control: StateDict = read_extra(payload.extra, CONTROL_KEY, self.name)
        names = [name for name, p in ctx.model.named_parameters() if p.requires_grad and name in control]
        device = ctx.data.x.device
        c = {name: control[name].to(device) for name in names}
        own: StateDict | None = ctx.client_state
        c_i = {name: torch.zeros_like(c[name]) if own is None else own[name].to(device) for name in names}
        return c, c_i

    def loss_fn(self, payload: Payload, ctx: ClientContext) -> LossFn:
        """CE plus ``sum <c - c_i, w>``: the local gradients corrected by ``c - c_i``."""
        c, c_i = self._controls(payload, ctx)
        # the correction reaches the loss as this client's tensors (the same keys for every client), so a
        # round's clients can be batched and recorded steps serve every round
        correction = {name: c[name] - c_i[name] for name in c}

        def loss(
            model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
        ) -> LossOutput:
            del step
            ce = mean_cross_entropy(model(x), y)
            return LossOutput(ce + correction_term(model, client), {"ce": ce.detach()})

        return BatchableLoss(loss, correction, rounds_key=(), masked=True)

    def client_update(self, payload: Payload, ctx: ClientContext) -> ClientUpdate:
        c, c_i = self._controls(payload, ctx)
        if self.config.control_update == "displacement":
            update = super().client_update(payload, ctx)
            scale = 1.0 / (local_steps(update) * payload.train.lr)
            moved = {
                name: (payload.model_state[name].to(c[name]) - update.model_state[name].to(c[name])) * scale
                for name in c
            }  # (x - y_i) / (K lr): the mean corrected gradient under plain SGD
        else:
            # the hooks must see every step's gradient, so the steps are not replayed from recorded graphs
            eager = replace(payload, train=replace(payload.train, cuda_graphs=False))
            with gradient_sums(ctx.model, list(c)) as sums:
                update = super().client_update(eager, ctx)
            steps = local_steps(update)
            moved = {name: (sums[name] / steps).to(c[name].dtype) for name in c}
        new_c_i: StateDict = {}
        delta_c: StateDict = {}
        for name in c:
            new_c_i[name] = c_i[name] - c[name] + moved[name]  # option II
            delta_c[name] = new_c_i[name] - c_i[name]
        update.extra = {**update.extra, DELTA_KEY: delta_c}
        return replace(update, client_state=new_c_i)

    def kept_state(self, update: ClientUpdate) -> Any:
        """Nothing from the hook: :meth:`client_update` sets ``c_i+`` itself."""
        del update
        return None

    def server_update(
        self, state: ServerState, updates: Sequence[ClientUpdate], run: RunContext
    ) -> ServerState:
        average = weighted_average([u.model_state for u in updates], [u.num_examples for u in updates])
        if self.config.server_lr == 1.0:
            model_state = average
        else:
            delta = client_delta(state.model_state, average, stepped_keys(state.model_state))
            step = {key: self.config.server_lr * d for key, d in delta.items()}
            model_state = apply_step(state.model_state, average, step)
        total = total_samples(run, updates)
        control: StateDict = state.extra[CONTROL_KEY]
        new_control: StateDict = {}
        for key, value in control.items():
            acc = value.to(torch.float64)
            for u in updates:
                delta_c: StateDict = read_extra(u.extra, DELTA_KEY, self.name)
                acc = acc + delta_c[key].to(acc) * (u.num_examples / total)
            new_control[key] = acc.to(value.dtype)
        extra = {**state.extra, CONTROL_KEY: new_control}
        return replace(state, round_num=state.round_num + 1, model_state=model_state, extra=extra)

    def round_metrics(self, state: ServerState) -> dict[str, float]:
        control = state.extra.get(CONTROL_KEY)
        if not control:
            return {}
        squares = torch.stack([v.double().pow(2).sum() for v in control.values()])
        return {"scaffold/c_norm": float(squares.sum().sqrt())}
