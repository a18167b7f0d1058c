"""q-FFL, trained with q-FedAvg: fair resource allocation by re-weighting clients with high loss.

Fair Resource Allocation in Federated Learning. T. Li, M. Sanjabi, A. Beirami, V. Smith. ICLR 2020.
arXiv:1905.10497. Objective ``min_w sum_k p_k F_k(w)^(q+1) / (q+1)``; Algorithm 3 (q-FedAvg). Fed-ZDA's
fairness baseline.

Round t with global weights w and selected clients S:

* client k computes ``F_k(w)``, the mean loss of the received model on its local training data, then runs
  FedAvg's local training to ``w_k``; with ``L = 1 / lr`` (the paper's estimate of the Lipschitz constant)
  ``Delta w_k = L (w - w_k)``, ``Delta_k = F_k(w)^q Delta w_k`` and
  ``h_k = q F_k(w)^(q-1) ||Delta w_k||^2 + L F_k(w)^q``;
* the server sets ``w <- w - sum_k Delta_k / sum_k h_k``, i.e. ``w + sum_k c_k (w_k - w)`` with
  ``c_k = L F_k^q / sum_j h_j``.

``q = 0`` gives ``h_k = L`` and ``c_k = 1/|S|``: the unweighted mean of the client weights (FedAvg with equal
weights; equal to fedaug's size-weighted FedAvg when clients hold equally many samples, up to rounding).
Losses enter as ``F + 1e-10`` as in the authors' code.

# Deviation from paper: the paper's models have no batch norm. ||Delta w_k||^2 sums over trainable parameters
# only; BN running statistics get the same update ``w + sum_k c_k (w_k - w)`` (a convex combination, since
# sum_k c_k <= 1, so running variances stay positive); integer buffers take the maximum, as in FedAvg.
# F_k(w) is measured in eval mode (BN running statistics), one pass over the local training data.
# Paper is silent on q for Fed-ZDA's tables; q-FFL's own experiments use values from 0.001 to 15; default 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F

from fedaug.api import ClientContext, ClientUpdate, MethodConfig, Payload, RunContext, ServerState
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.parts.checks import check_in_range, check_nonnegative
from fedaug.methods.parts.payloads import read_extra
from fedaug.registry import register
from fedaug.training.loop import load_weights
from fedaug.types import Extra, StateDict

LOSS_EPS = 1e-10  # the authors' code adds it before taking powers of the loss


@dataclass(frozen=True)
class QFFLConfig(MethodConfig):
    """q-FedAvg's hyper-parameters.

    Attributes:
        q: fairness parameter (>= 0; 0 is the unweighted mean of client models; larger q favours clients with
            high loss). Paper silent for Fed-ZDA; default 1.
        lipschitz: the constant L; None (default) uses ``1 / lr`` of the round, as the q-FFL paper.
    """

    q: float = 1.0
    lipschitz: float | None = None

    def __post_init__(self) -> None:
        check_nonnegative(self, ("q",))
        check_in_range(self, ("lipschitz",), 0, math.inf, low_open=True, allow_none=True)


@dataclass(frozen=True)
class QFFLWeights:
    """What a q-FFL client reports beside its weights (``ClientUpdate.extra``: ``qffl_scale``, ``qffl_h``).

    Attributes:
        scale: L F_k^q, the scale of its ``w - w_k`` in the server's numerator.
        h: h_k, its term of the denominator.
    """

    scale: float
    h: float

    def to_extra(self) -> Extra:
        return {"qffl_scale": self.scale, "qffl_h": self.h}

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any]) -> QFFLWeights:
        return cls(read_extra(extra, "qffl_scale", "qffl"), read_extra(extra, "qffl_h", "qffl"))


@dataclass(frozen=True)
class QFFLStep:
    """The server's step of the round (``ServerState.extra``: ``step``), logged as ``qffl/step``.

    Attributes:
        step: sum_k c_k, the fraction of the way to the clients' mean it moved (1 when q = 0).
    """

    step: float

    def to_extra(self) -> Extra:
        return {"step": self.step}

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any]) -> QFFLStep | None:
        """The round's step; None before the first aggregation (the state has none yet)."""
        return cls(extra["step"]) if "step" in extra else None


@torch.no_grad()
def mean_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024) -> float:
    """Mean cross-entropy of ``model`` (eval mode) on ``(x, y)``; the model's mode is restored.

    The batch sums are added in float64 on ``y``'s device and read once (no host-device sync per batch on a
    GPU); adding float32 sums in float64 one after the other rounds as adding them as Python floats does.
    """
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=y.device)
    for start in range(0, y.shape[0], batch_size):
        logits = model(x[start : start + batch_size])
        total += F.cross_entropy(logits, y[start : start + batch_size], reduction="sum").double()
    model.train(was_training)
    return float(total) / max(y.shape[0], 1)


@torch.no_grad()
def squared_distance(state: StateDict, model: torch.nn.Module) -> float:
    """``||w - w_k||^2`` over ``model``'s trainable parameters, ``w`` from ``state`` (moved to each
    parameter's device and dtype); the per-parameter sums are added in float64 on the device and read once
    (as adding them as Python floats rounds)."""
    total: torch.Tensor | None = None
    for name, param in model.named_parameters():
        if param.requires_grad:
            term = (state[name].to(param) - param.detach()).pow(2).sum().double()
            total = term if total is None else total + term
    return 0.0 if total is None else float(total)


def qffl_weights(q: float, lipschitz: float, loss: float, sq_distance: float) -> tuple[float, float]:
    """``(L F^q, h)`` of one client: the scale of its ``w - w_k`` in the numerator, and its ``h_k``.

    ``sq_distance`` is ``||w - w_k||^2``, so ``||Delta w_k||^2 = L^2 sq_distance``.
    """
    f = loss + LOSS_EPS
    scale = lipschitz * f**q
    grad_term = 0.0 if q == 0 else q * f ** (q - 1) * lipschitz**2 * sq_distance
    return scale, grad_term + scale


@register(
    "method",
    "qffl",
    summary="q-FFL trained with q-FedAvg: clients with high loss weigh more, for fairness",
    paper="Li et al., ICLR 2020",
)
class QFFL(FedAvg):
    """q-FFL via q-FedAvg.

    Client: FedAvg's local training, plus :class:`QFFLWeights` (L F_k^q and h_k) in its update's ``extra``;
    logs ``qffl/loss_before`` (F_k at the received weights). Server: ``w + sum_k c_k (w_k - w)`` with
    ``c_k = scale_k / sum_j h_j``; logs ``qffl/step`` (:class:`QFFLStep`: sum_k c_k, 1 when q = 0).
    """

    name = "qffl"
    config_cls = QFFLConfig
    config: QFFLConfig

    def client_update(self, payload: Payload, ctx: ClientContext) -> ClientUpdate:
        load_weights(ctx.model, payload.model_state)
        loss = mean_loss(ctx.model, ctx.data.x, ctx.data.y)
        update = super().client_update(payload, ctx)
        sq_distance = squared_distance(payload.model_state, ctx.model)
        lipschitz = self.config.lipschitz or 1.0 / payload.train.lr
        scale, h = qffl_weights(self.config.q, lipschitz, loss, sq_distance)
        update.extra = {**update.extra, **QFFLWeights(scale, h).to_extra()}
        update.metrics = {**update.metrics, "qffl/loss_before": loss}
        return update

    def server_update(
        self, state: ServerState, updates: Sequence[ClientUpdate], run: RunContext
    ) -> ServerState:
        del run
        weights = [QFFLWeights.from_extra(u.extra) for u in updates]
        total_h = sum(float(w.h) for w in weights)
        coefficients = [float(w.scale) / total_h for w in weights]
        model_state = combine(state.model_state, [u.model_state for u in updates], coefficients)
        extra = {**state.extra, **QFFLStep(sum(coefficients)).to_extra()}
        return replace(state, round_num=state.round_num + 1, model_state=model_state, extra=extra)

    def round_metrics(self, state: ServerState) -> dict[str, float]:
        step = QFFLStep.from_extra(state.extra)
        return {} if step is None else {"qffl/step": float(step.step)}


def combine(global_state: StateDict, states: Sequence[StateDict], coefficients: Sequence[float]) -> StateDict:
    """``w + sum_k c_k (w_k - w)`` for floating entries (in float64); integer entries take the maximum."""
    result: StateDict = {}
    for key, value in global_state.items():
        if value.is_floating_point():
            base = value.to(torch.float64)
            acc = base.clone()
            for state, coefficient in zip(states, coefficients, strict=True):
                acc.add_(state[key].to(torch.float64) - base, alpha=coefficient)
            result[key] = acc.to(value.dtype)
        else:
            result[key] = torch.stack([state[key] for state in states]).amax(dim=0)
    return result
