"""FedNTD.

Preservation of the Global Knowledge by Not-True Distillation in Federated Learning. G. Lee, M. Jeong,
Y. Shin, S. Bae, S.-Y. Yun. NeurIPS 2022. arXiv:2106.03097.

Difference from FedAvg: local training forgets what the global model knows about the classes a client
lacks. Each client therefore distils the frozen global model's predictions over the *not-true* classes
(the true class removed) into its local model, ``CE + beta * T^2 * KL(p_global_nt || p_local_nt)``, leaving
the true-class signal to the cross-entropy. Server aggregation is FedAvg's. ``ntd_beta = 0`` is exactly
FedAvg.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from fedaug.api import ClientContext, MethodConfig, Payload
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.parts.checks import check_nonnegative, check_positive
from fedaug.methods.parts.losses import frozen_model, not_true_distillation
from fedaug.registry import register
from fedaug.training.loop import BatchableLoss, ClientTensors, LossFn, LossOutput
from fedaug.training.row_mask import mean_cross_entropy


@dataclass(frozen=True)
class FedNTDConfig(MethodConfig):
    """FedNTD's hyper-parameters (defaults: the paper's and its official config, also the FLea papers').

    Attributes:
        ntd_beta: weight beta of the not-true distillation term (>= 0; default 1). 0 is FedAvg.
        ntd_tau: softmax temperature T of the distillation (> 0; default 1); the term is scaled by T^2.
    """

    ntd_beta: float = 1.0
    ntd_tau: float = 1.0

    def __post_init__(self) -> None:
        check_nonnegative(self, ("ntd_beta",))
        check_positive(self, ("ntd_tau",))


@register(
    "method", "fedntd", summary="FedAvg + not-true-class distillation", paper="Lee et al., NeurIPS 2022"
)
class FedNTD(FedAvg):
    """FedAvg with not-true distillation from the global model.

    Client: loads the broadcast weights into the training model and into the shared ``"teacher"`` workspace
    model, which stays frozen (eval mode, no gradient). Each batch costs one extra teacher forward pass; the
    loss is ``CE(l, y) + ntd_beta * T^2 * KL(softmax(g_nt/T) || softmax(l_nt/T))`` with l and g the local and
    global logits and ``_nt`` the true-class column removed. Logs ``train/ce`` and ``train/ntd`` (the KL term
    before the beta weight).
    Server: FedAvg's weighted mean.
    """

    name = "fedntd"
    config_cls = FedNTDConfig
    config: FedNTDConfig

    def loss_fn(self, payload: Payload, ctx: ClientContext) -> LossFn:
        """CE plus the not-true distillation from the frozen global model."""
        teacher = frozen_model(ctx, "teacher", payload.model_state)
        beta, temperature = self.config.ntd_beta, self.config.ntd_tau
        # Deviation from paper: the paper trains locally with SGD (lr 0.01, momentum 0.9); we use the FLea
        # protocol (Adam, lr 1e-3 decayed per round, 5 epochs) for every method.

        def loss(
            model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
        ) -> LossOutput:
            del client, step
            logits = model(x)
            ce = mean_cross_entropy(logits, y)
            with torch.no_grad():
                global_logits = teacher(x)
            ntd = not_true_distillation(logits, global_logits, y, temperature)
            return LossOutput(ce + beta * ntd, {"ce": ce.detach(), "ntd": ntd.detach()})

        # the teacher is the broadcast model, the same for every client: a workspace model loaded in place,
        # the same tensors every round
        return BatchableLoss(loss, rounds_key=(), masked=True)
