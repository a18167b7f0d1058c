"""FedDecorr.

Towards Understanding and Mitigating Dimensional Collapse in Heterogeneous Federated Learning. Y. Shi,
J. Liang, W. Zhang, V. Y. F. Tan, S. Bai. ICLR 2023. arXiv:2210.00226.

Difference from FedAvg: label-skewed local training collapses the representations into a low-dimensional
subspace, so each client adds ``beta * L_decorr(z)``, a penalty on the correlations between the dimensions
of its penultimate features z over the mini-batch. Server aggregation is FedAvg's. ``decorr_beta = 0`` is
exactly FedAvg.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from fedaug.api import ClientContext, MethodConfig, Payload
from fedaug.errors import IncompatibleModelError
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.parts.checks import check_nonnegative
from fedaug.methods.parts.losses import decorrelation_loss, features_and_logits
from fedaug.registry import register
from fedaug.training.loop import BatchableLoss, ClientTensors, LossFn, LossOutput
from fedaug.training.row_mask import mean_cross_entropy


@dataclass(frozen=True)
class FedDecorrConfig(MethodConfig):
    """FedDecorr's hyper-parameter.

    Attributes:
        decorr_beta: weight beta of the decorrelation loss (>= 0; default 0.1, the coefficient of every
            FedDecorr run script, also hard-coded in the official FLea code). 0 is FedAvg.
    """

    decorr_beta: float = 0.1

    def __post_init__(self) -> None:
        check_nonnegative(self, ("decorr_beta",))


@register(
    "method",
    "feddecorr",
    summary="FedAvg + a decorrelation penalty on the penultimate features",
    paper="Shi et al., ICLR 2023",
)
class FedDecorr(FedAvg):
    """FedAvg with a decorrelation penalty on the penultimate features.

    Client: one forward pass gives the penultimate features ``z = model.penultimate(x)`` and the logits
    ``model.classifier(z)``; the loss is ``CE + decorr_beta * L_decorr(z)``, where ``L_decorr`` standardises z
    over the batch and takes the mean squared off-diagonal entry of ``Z^T Z`` divided by the batch size
    (0 for a batch of one). Logs ``train/ce`` and ``train/decorr``.
    Server: FedAvg's weighted mean.

    Works with every :class:`~fedaug.models.base.SplitModel` (unlike the official FLea code, where it crashes
    on HARNet and AudioNet).
    """

    name = "feddecorr"
    config_cls = FedDecorrConfig
    config: FedDecorrConfig

    def loss_fn(self, payload: Payload, ctx: ClientContext) -> LossFn:
        """CE plus the decorrelation of the penultimate features (same forward pass).

        Raises:
            IncompatibleModelError: if the model's penultimate features have a single dimension.
        """
        del payload
        feature_dim = ctx.model.classifier.in_features
        if feature_dim < 2:
            raise IncompatibleModelError(
                f"feddecorr needs penultimate features of >= 2 dimensions; "
                f"{type(ctx.model).__name__} has {feature_dim}"
            )
        beta = self.config.decorr_beta
        # Deviation from paper: the paper writes the penalty as ||K||_F^2 / d^2 with K the correlation
        # matrix; we use the authors' released loss (mean squared off-diagonal of the standardised Gram
        # matrix, divided by N), with which beta = 0.1 was tuned and which the FLea code copies.
        # Deviation from paper: the paper trains locally with SGD (lr 0.01, momentum 0.9, 10 epochs); we use
        # the FLea protocol (Adam, lr 1e-3 decayed per round, 5 epochs) for every method.

        def loss(
            model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
        ) -> LossOutput:
            del client, step
            features, logits = features_and_logits(model, x)
            ce = mean_cross_entropy(logits, y)
            decorr = decorrelation_loss(features)
            return LossOutput(ce + beta * decorr, {"ce": ce.detach(), "decorr": decorr.detach()})

        # config numbers only: one recording serves every round
        return BatchableLoss(loss, rounds_key=(), masked=True)
