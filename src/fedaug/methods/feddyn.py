"""FedDyn: federated learning with dynamic regularisation.

Federated Learning Based on Dynamic Regularization. D. A. E. Acar, Y. Zhao, R. Matas Navarro, M. Mattina,
P. N. Whatmough, V. Saligrama. ICLR 2021. arXiv:2111.04263. Algorithm 1.

Client k keeps ``g_k``, the gradient of its local loss at its last local model (0 before its first
participation). From the global weights ``theta`` it minimises the dynamically regularised loss::

    L_k(w) - <g_k, w> + alpha/2 ||w - theta||^2

to ``theta_k``, then sets ``g_k <- g_k - alpha (theta_k - theta)`` (the first-order condition of its problem:
``g_k`` is again the gradient of ``L_k`` at ``theta_k``) and keeps it for its next participation (engine-owned
client state: checkpointed, so a resumed run is identical). The server keeps ``h`` (in
``ServerState.extra``)::

    h     <- h - alpha sum_k (n_k / N) (theta_k - theta)
    theta <- mean_k theta_k - h / alpha

so at a fixed point the clients' gradients cancel and ``theta`` minimises the sum of the local losses, not
the biased fixed point of FedAvg with many local steps. ``alpha = 0`` is FedAvg exactly (tested): the two
terms vanish and the server takes FedAvg's mean.

# Deviation from paper: the paper averages uniformly (1/|P| for theta, 1/m clients for h); we weight by local
# data size (FedAvg's mean, n_k / N samples of all clients for h), which keeps the fixed point argument for
# FedAvg's objective (the pooled data's loss) and makes alpha = 0 FedAvg. The paper's algorithm needs
# alpha > 0; alpha = 0 is defined here as FedAvg.
# Deviation from paper: the paper's clients run SGD (with weight decay); we use the FLea protocol (Adam, lr
# 1e-3 decayed per round, 5 local epochs) by default: only the objective changes. BN running statistics get
# no regulariser and take FedAvg's mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from fedaug.api import ClientContext, ClientUpdate, MethodConfig, Payload, RunContext, ServerState
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.parts.aggregate import weighted_average
from fedaug.methods.parts.checks import check_nonnegative
from fedaug.methods.parts.losses import proximal_term
from fedaug.methods.parts.server_steps import apply_step, filled_like, stepped_keys
from fedaug.methods.scaffold import correction_term, total_samples
from fedaug.registry import register
from fedaug.training.loop import BatchableLoss, ClientTensors, LossFn, LossOutput
from fedaug.training.row_mask import mean_cross_entropy
from fedaug.types import StateDict

H_KEY = "feddyn_h"
GRAD = "grad."
ANCHOR = "anchor."


@dataclass(frozen=True)
class FedDynConfig(MethodConfig):
    """FedDyn's hyper-parameter.

    Attributes:
        alpha: weight of the dynamic regulariser (>= 0; default 0.01, the paper's most used value, from
            {0.1, 0.01, 0.001}). 0 is FedAvg.
    """

    alpha: float = 0.01

    def __post_init__(self) -> None:
        check_nonnegative(self, ("alpha",))


@register(
    "method",
    "feddyn",
    summary="FedAvg with a dynamic regulariser that aligns the local optima with the global one",
    paper="Acar et al., ICLR 2021",
)
class FedDyn(FedAvg):
    """FedDyn.

    Client: trains with ``CE - <g_k, w> + alpha/2 ||w - theta||^2`` (logs ``train/ce``, ``train/linear``,
    ``train/prox``), keeps ``g_k - alpha (theta_k - theta)``. Server: ``h`` and
    ``theta = mean_k theta_k - h / alpha`` on the trainable weights, FedAvg's mean for BN statistics.
    """

    name = "feddyn"
    config_cls = FedDynConfig
    config: FedDynConfig

    def init_server(self, model_state: StateDict, run: RunContext) -> ServerState:
        state = super().init_server(model_state, run)
        return replace(
            state, extra={**state.extra, H_KEY: filled_like(model_state, stepped_keys(model_state))}
        )

    def _grads(self, payload: Payload, ctx: ClientContext) -> tuple[dict[str, Tensor], StateDict]:
        """``(theta, g_k)`` on the client's device, keyed by the trainable parameters' names."""
        device = ctx.data.x.device
        theta = {
            name: payload.model_state[name].detach().to(device)
            for name, p in ctx.model.named_parameters()
            if p.requires_grad
        }
        own: StateDict | None = ctx.client_state
        grads = {name: torch.zeros_like(t) if own is None else own[name].to(t) for name, t in theta.items()}
        return theta, grads

    def loss_fn(self, payload: Payload, ctx: ClientContext) -> LossFn:
        """CE minus ``<g_k, w>`` plus ``alpha/2 ||w - theta||^2``."""
        half_alpha = 0.5 * self.config.alpha
        theta, grads = self._grads(payload, ctx)
        # g_k and theta reach the loss as client tensors, so the round's clients can be batched and recorded
        # steps serve every round with the same alpha
        client = {**{GRAD + k: v for k, v in grads.items()}, **{ANCHOR + k: v for k, v in theta.items()}}

        def loss(
            model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
        ) -> LossOutput:
            del step
            ce = mean_cross_entropy(model(x), y)
            g = {k[len(GRAD) :]: v for k, v in client.items() if k.startswith(GRAD)}
            anchors = {k[len(ANCHOR) :]: v for k, v in client.items() if k.startswith(ANCHOR)}
            linear = correction_term(model, g)
            prox = half_alpha * proximal_term(model, anchors)
            return LossOutput(
                ce - linear + prox, {"ce": ce.detach(), "linear": linear.detach(), "prox": prox.detach()}
            )

        return BatchableLoss(loss, client, rounds_key=(half_alpha,), masked=True)

    def client_update(self, payload: Payload, ctx: ClientContext) -> ClientUpdate:
        theta, grads = self._grads(payload, ctx)
        update = super().client_update(payload, ctx)
        alpha = self.config.alpha
        new_grads = {
            name: g - alpha * (update.model_state[name].to(g) - theta[name]) for name, g in grads.items()
        }
        return replace(update, client_state=new_grads)

    def kept_state(self, update: ClientUpdate) -> Any:
        """Nothing from the hook: :meth:`client_update` sets ``g_k`` itself."""
        del update
        return None

    def server_update(
        self, state: ServerState, updates: Sequence[ClientUpdate], run: RunContext
    ) -> ServerState:
        average = weighted_average([u.model_state for u in updates], [u.num_examples for u in updates])
        alpha = self.config.alpha
        if alpha == 0:  # the paper needs alpha > 0; 0 is FedAvg (h stays 0)
            return replace(state, round_num=state.round_num + 1, model_state=average)
        total = total_samples(run, updates)
        h: StateDict = state.extra[H_KEY]
        new_h: StateDict = {}
        step: StateDict = {}
        for key, value in h.items():
            base = state.model_state[key].to(torch.float64)
            acc = value.clone()
            for u in updates:
                acc.add_(u.model_state[key].to(torch.float64) - base, alpha=-alpha * u.num_examples / total)
            new_h[key] = acc
            # theta = mean - h / alpha, written as a step from theta: (mean - theta) - h / alpha
            step[key] = average[key].to(torch.float64) - base - acc / alpha
        model_state = apply_step(state.model_state, average, step)
        return replace(
            state, round_num=state.round_num + 1, model_state=model_state, extra={**state.extra, H_KEY: new_h}
        )
