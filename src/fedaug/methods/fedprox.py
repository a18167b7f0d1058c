"""FedProx.

Federated Optimization in Heterogeneous Networks. T. Li, A. K. Sahu, M. Zaheer, M. Sanjabi, A. Talwalkar,
V. Smith. MLSys 2020. arXiv:1812.06127.

Difference from FedAvg: each client minimises its local loss plus the proximal term
``mu/2 * ||w - w_global||^2`` (the squared Euclidean distance over all trainable parameters to the weights it
received), which limits how far local training drifts from the global model. Server aggregation is FedAvg's.
``proximal_mu = 0`` is exactly FedAvg.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from torch import Tensor, nn

from fedaug.api import ClientContext, MethodConfig, Payload
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.parts.checks import check_nonnegative
from fedaug.methods.parts.losses import proximal_term
from fedaug.registry import register
from fedaug.training.loop import BatchableLoss, ClientTensors, LossFn, LossOutput
from fedaug.training.row_mask import mean_cross_entropy

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FedProxConfig(MethodConfig):
    """FedProx's hyper-parameter.

    Attributes:
        proximal_mu: weight mu of the proximal term ``mu/2 * ||w - w_global||^2`` (>= 0; default 0.01). The
            FedProx paper tunes mu per dataset over {0.001, 0.01, 0.1, 1}; the FLea papers searched
            {0.1, 0.01, 0.001}. 0 is FedAvg.
    """

    proximal_mu: float = 0.01

    def __post_init__(self) -> None:
        check_nonnegative(self, ("proximal_mu",))


@register(
    "method",
    "fedprox",
    summary="FedAvg + a proximal term towards the global weights",
    paper="Li et al., MLSys 2020",
)
class FedProx(FedAvg):
    """FedAvg with a proximal term in the local objective.

    Client: loads the global weights ``w_global`` and trains with
    ``CE + proximal_mu/2 * sum ||w - w_global||^2`` over the trainable parameters (BN running statistics are
    buffers and are not pulled). Logs ``train/ce`` and ``train/prox`` (the added term).
    Server: FedAvg's weighted mean.
    """

    name = "fedprox"
    config_cls = FedProxConfig
    config: FedProxConfig

    def __init__(self, config: FedProxConfig | None = None) -> None:
        super().__init__(config)
        if self.config.proximal_mu == 0:
            logger.warning("fedprox with proximal_mu=0 is plain FedAvg (the proximal term has no effect)")

    def loss_fn(self, payload: Payload, ctx: ClientContext) -> LossFn:
        """CE plus the proximal pull towards the broadcast weights."""
        half_mu = 0.5 * self.config.proximal_mu
        # Deviation from paper: the paper's clients run SGD and may stop early (gamma-inexact solutions);
        # we use the FLea protocol (Adam, fixed local epochs) for every method, so only the objective changes.
        # The anchors (the broadcast weights) reach the loss as client tensors keyed by parameter name, the
        # same for every client, so that with mu in rounds_key one round's recorded steps serve every later
        # round (engine.cuda_graphs).
        anchors = {
            name: payload.model_state[name].detach().to(param.device)
            for name, param in ctx.model.named_parameters()
            if param.requires_grad
        }

        def loss(
            model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
        ) -> LossOutput:
            del step
            ce = mean_cross_entropy(model(x), y)
            prox = half_mu * proximal_term(model, client)  # client: the anchors
            return LossOutput(ce + prox, {"ce": ce.detach(), "prox": prox.detach()})

        return BatchableLoss(loss, anchors, rounds_key=(half_mu,), masked=True)
