"""MOON.

Model-Contrastive Federated Learning. Q. Li, B. He, D. Song. CVPR 2021. arXiv:2103.16257.

Difference from FedAvg: each client adds a model-contrastive term that pulls the representation of its
local model towards the global model's representation of the same input (positive pair) and away from the
representation of its own previous local model (negative pair), correcting the local drift at the
representation level. This needs per-client state across rounds: the client's local weights after its
last participation, which live in the engine-owned client state (checkpointed, so a resumed run is
identical). Server aggregation is FedAvg's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call

from fedaug.api import ClientContext, ClientUpdate, MethodConfig, Payload
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.parts.checks import check_nonnegative, check_positive
from fedaug.methods.parts.losses import features_and_logits, frozen_model, model_contrastive_loss
from fedaug.models.base import SplitModel
from fedaug.registry import register
from fedaug.runtime.device import host_to_device
from fedaug.training.loop import BatchableLoss, ClientTensors, LossFn, LossOutput
from fedaug.training.row_mask import mean_cross_entropy


@dataclass(frozen=True)
class MOONConfig(MethodConfig):
    """MOON's hyper-parameters.

    Attributes:
        contrastive_mu: weight mu of the model-contrastive loss (>= 0; default 1, the official code's default
            and the FLea papers' value; the paper's best is 5 on CIFAR-10 and 1 on CIFAR-100/Tiny-ImageNet,
            from {0.1, 1, 5, 10}). 0 is FedAvg.
        contrastive_temperature: temperature of the cosine similarities (> 0; default 0.5, the paper's).
    """

    contrastive_mu: float = 1.0
    contrastive_temperature: float = 0.5

    def __post_init__(self) -> None:
        check_nonnegative(self, ("contrastive_mu",))
        check_positive(self, ("contrastive_temperature",))


@register(
    "method",
    "moon",
    summary="FedAvg + a model-contrastive loss (global vs the client's previous model)",
    paper="Li et al., CVPR 2021",
)
class MOON(FedAvg):
    """FedAvg with the model-contrastive loss.

    Client: loads the broadcast weights into the training model and into the frozen ``"teacher"`` workspace
    model, and its previous local weights (``ctx.client_state``) into the frozen ``"previous"`` workspace
    model. With z, z_glob, z_prev the penultimate features of the three models, the loss is
    ``CE + mu * -log(e^{cos(z, z_glob)/t} / (e^{cos(z, z_glob)/t} + e^{cos(z, z_prev)/t}))``. On a client's
    first participation there is no previous model and the contrastive term is 0, as in the official code's
    first round (its contrastive logits then hold only the positive pair, whose cross-entropy is 0).
    It returns its trained weights as ``client_state`` for its next participation. Logs ``train/ce`` and
    ``train/contrastive``.
    Server: FedAvg's weighted mean.

    Memory: like the official code, MOON keeps one model state per client that has participated, on the
    run's device (where the trained weights are; a resumed run's are loaded there too).
    """

    name = "moon"
    config_cls = MOONConfig
    config: MOONConfig

    def loss_fn(self, payload: Payload, ctx: ClientContext) -> LossFn:
        """CE plus the model-contrastive loss against the global and the previous local model."""
        mu, temperature = self.config.contrastive_mu, self.config.contrastive_temperature
        glob = frozen_model(ctx, "teacher", payload.model_state)
        previous = _Penultimate(frozen_model(ctx, "previous", payload.model_state))
        # The previous model reaches the loss as this client's tensors (so a round's clients can be batched);
        # on a first participation they are a stand-in (the broadcast weights) and the term is 0.
        state = payload.model_state if ctx.client_state is None else ctx.client_state
        client = {f"model.{k}": v for k, v in state.items()}
        client["has_previous"] = host_to_device(torch.tensor(ctx.client_state is not None), ctx.data.x.device)
        # Deviation from paper: the paper's models add a 2-layer projection head and contrast its output; we
        # contrast the penultimate features of the unchanged model (``model.penultimate``), so every
        # SplitModel works and MOON trains the same architecture as the other methods.
        # Deviation from paper: the paper trains locally with SGD (lr 0.01, momentum 0.9, 10 epochs); we use
        # the FLea protocol (Adam, lr 1e-3 decayed per round, 5 epochs) for every method.

        def loss(
            model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
        ) -> LossOutput:
            del step
            features, logits = features_and_logits(model, x)
            ce = mean_cross_entropy(logits, y)
            with torch.no_grad():
                z_glob = glob.penultimate(x)
                weights = {k: v for k, v in client.items() if k.startswith("model.")}
                z_prev = functional_call(previous, weights, (x,))
            contrastive = torch.where(
                client["has_previous"],
                model_contrastive_loss(features, z_glob, z_prev, temperature),
                features.new_zeros(()),
            )
            return LossOutput(ce + mu * contrastive, {"ce": ce.detach(), "contrastive": contrastive.detach()})

        # the global model is a workspace model loaded in place (the same tensors every round), the previous
        # one comes as client tensors: one recording serves every round
        return BatchableLoss(loss, client, rounds_key=(), masked=True)

    def kept_state(self, update: ClientUpdate) -> Any:
        """The trained weights become this client's previous model for its next participation."""
        return dict(update.model_state)


class _Penultimate(nn.Module):
    """``model.penultimate`` as a module's forward, so ``functional_call`` can run it with other weights."""

    def __init__(self, model: SplitModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        return self.model.penultimate(x)
