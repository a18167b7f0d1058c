"""CCVR: classifier calibration with virtual representations, on the server, after FedAvg training.

No Fear of Heterogeneity: Classifier Calibration for Federated Learning with Non-IID Data. M. Luo, F. Chen,
D. Hu, Y. Zhang, J. Liang, J. Feng. NeurIPS 2021. arXiv:2106.05001.

Differences from FedAvg. Training is FedAvg's. After the final round (post-hoc, as the paper), every client
computes penultimate features of its data with the global model and sends, per class it holds, the count,
mean and covariance; the server pools them into one Gaussian per class (exact pooled-sample statistics),
samples ``virtual_per_class`` virtual features per class, and fine-tunes only the classifier (the last linear
layer) on them with SGD and cross-entropy. ``variant: shared_features`` is the FLea papers' version: the
classifier is fitted on real penultimate features of an alpha = 10% fraction of every client's data (the
amount FLea shares) instead of on Gaussian samples. The calibrated classifier only enters evaluation
(:meth:`CCVR.eval_state`); the global weights that keep training stay FedAvg's.

``method.share_dp`` (off by default) protects what clients upload with the Gaussian mechanism of
:mod:`fedaug.privacy.gaussian`, each sample's penultimate feature clipped to ``clip``: ``shared_features``
sends the clipped features plus noise of std ``noise_multiplier * clip`` (FLea's rows), ``gaussian`` the
class statistics of clipped features with noise on their sums
(:func:`~fedaug.methods.ccvr.stats.private_class_statistics`). Every share is one release of each sample
it covers (post-hoc: one; ``calibrate_every_round``: one per round until the budget stops it).

# Deviation from official FLea code: it fine-tunes the whole network on raw data on client 0 (see
# docs/methods/flea.md, "The authors' code"); we implement CCVR as the papers describe it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from fedaug.api import ClientContext, ClientShare, MethodConfig, RunContext, ServerState, ShareRequest
from fedaug.errors import IncompatibleModelError
from fedaug.methods.ccvr.stats import (
    ClassStatistics,
    class_statistics,
    fit_classifier,
    pool_statistics,
    private_class_statistics,
    sample_virtual,
)
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.flea.buffer import share_indices
from fedaug.methods.parts import share_dp
from fedaug.methods.parts.checks import check_at_least, check_choice, check_in_range, check_positive
from fedaug.methods.parts.losses import frozen_model
from fedaug.methods.parts.payloads import SharedSamples, read_extra
from fedaug.models.base import SplitModel
from fedaug.privacy import gaussian
from fedaug.registry import register
from fedaug.runtime.seeding import torch_generator
from fedaug.types import ClientId, Extra, Metrics, StateDict

VARIANTS = ("gaussian", "shared_features")
CLASSIFIER_KEYS = ("classifier.weight", "classifier.bias")


@dataclass(frozen=True)
class CCVRConfig(MethodConfig):
    """CCVR's hyper-parameters.

    Attributes:
        variant: ``gaussian`` (the CCVR paper: virtual features from pooled class Gaussians) or
            ``shared_features`` (the FLea papers: real features of ``share_fraction`` of every client's data).
        calibrate_every_round: calibrate after every round (to follow calibrated accuracy over rounds; every
            client then featurises all its data each round) instead of only after the final round (default;
            the paper's post-hoc calibration).
        virtual_per_class: virtual features sampled per class (``gaussian``; default 2000).
        share_fraction: fraction of each client's data whose features are shared (``shared_features``; FLea
            papers: alpha = 0.1, rounded down).
        calibration_epochs: passes of SGD over the calibration features (default 10).
        calibration_lr: SGD learning rate (default 0.01).
        calibration_momentum: SGD momentum (default 0.9).
        calibration_batch_size: mini-batch size of the calibration (default 64).
        share_dp: differential privacy for the uploads, off by default (``epsilon``, ``delta``, ``clip``,
            ``noise_multiplier``, ``releases``; :mod:`fedaug.privacy.gaussian`): each penultimate feature
            clipped to ``clip``; ``shared_features`` adds noise of std ``noise_multiplier * clip`` to each,
            ``gaussian`` noises each class's feature sum and second moment
            (:func:`~fedaug.methods.ccvr.stats.private_class_statistics`). Labels and class counts are sent
            in the clear.
    """

    variant: str = "gaussian"
    calibrate_every_round: bool = False
    virtual_per_class: int = 2000
    share_fraction: float = 0.1
    calibration_epochs: int = 10
    calibration_lr: float = 0.01
    calibration_momentum: float = 0.9
    calibration_batch_size: int = 64
    share_dp: gaussian.ShareDPConfig = field(default_factory=gaussian.ShareDPConfig)

    def __post_init__(self) -> None:
        check_choice("variant", self.variant, VARIANTS)
        check_at_least(self, ("virtual_per_class", "calibration_epochs", "calibration_batch_size"), 1)
        check_in_range(self, ("share_fraction",), 0, 1, low_open=True)
        check_positive(self, ("calibration_lr",))
        check_in_range(self, ("calibration_momentum",), 0, 1, high_open=True)


@dataclass(frozen=True)
class Calibration:
    """The server's calibrated classifier and what it logs (``ServerState.extra``: ``calibrated_round``,
    ``classifier_weight``, ``classifier_bias``, ``num_features``, ``calibration_loss``,
    ``bytes_up_per_client``; ``calibrated_round`` -1 and empty tensors before the first calibration).

    Attributes:
        round_num: the round whose global model it calibrated (evaluated in that round only).
        weight: the fitted classifier weight.
        bias: the fitted classifier bias.
        num_features: features (virtual or shared) it was fitted on.
        loss: the last epoch's mean calibration loss.
        bytes_up_per_client: what a client uploaded for it, on average.
    """

    round_num: int
    weight: Tensor
    bias: Tensor
    num_features: int
    loss: float
    bytes_up_per_client: float

    def to_extra(self) -> Extra:
        return {
            "calibrated_round": self.round_num,
            "classifier_weight": self.weight,
            "classifier_bias": self.bias,
            "num_features": self.num_features,
            "calibration_loss": self.loss,
            "bytes_up_per_client": self.bytes_up_per_client,
        }

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any]) -> Calibration:
        def read(key: str) -> Any:
            return read_extra(extra, key, "ccvr (the server's calibration)")

        return cls(
            read("calibrated_round"),
            read("classifier_weight"),
            read("classifier_bias"),
            read("num_features"),
            read("calibration_loss"),
            read("bytes_up_per_client"),
        )


@register(
    "method",
    "ccvr",
    summary="FedAvg, then the server calibrates the classifier on virtual features (pooled class Gaussians)",
    paper="Luo et al., NeurIPS 2021",
)
class CCVR(FedAvg):
    """CCVR.

    Client: FedAvg's local training. When asked (after the final round, or every round), extracts penultimate
    features of its local data with the global model (eval mode) and sends per-class count, mean and
    covariance (``gaussian``) or the features and labels of a random ``share_fraction`` subset
    (``shared_features``).
    Server: FedAvg aggregation; then pools the shares, fits a copy of the global classifier on virtual (or
    shared) features, and keeps it in ``extra`` for :meth:`eval_state`. Logs ``ccvr/calibrated``,
    ``ccvr/num_features``, ``ccvr/calibration_loss`` and ``ccvr/bytes_up_per_client`` in calibrated rounds
    (other rounds log exactly FedAvg's metrics: with ``engine.branch_from_fedavg`` a post-hoc CCVR run starts
    from the FedAvg run's checkpoint of round ``rounds - 1`` and only runs the last round).
    """

    name = "ccvr"
    config_cls = CCVRConfig
    config: CCVRConfig

    def __init__(self, config: CCVRConfig | None = None) -> None:
        super().__init__(config)
        self.dp = gaussian.resolve(self.config.share_dp)
        """The uploads' Gaussian mechanism (None: ``method.share_dp`` off)."""

    def init_server(self, model_state: StateDict, run: RunContext) -> ServerState:
        missing = [key for key in CLASSIFIER_KEYS if key not in model_state]
        if missing:
            raise IncompatibleModelError(f"ccvr needs a linear 'classifier' with a bias; missing {missing}")
        device = model_state[CLASSIFIER_KEYS[0]].device  # the run's: a checkpoint keeps one device
        empty = torch.empty(0, device=device)
        none = Calibration(-1, empty, empty, num_features=0, loss=float("nan"), bytes_up_per_client=0.0)
        if self.dp is not None:
            share_dp.warn_if_nothing_allowed(self.dp)
        return ServerState(round_num=0, model_state=model_state, extra=none.to_extra())

    def fedavg_rounds(self, num_rounds: int) -> int:
        """Every round before the final one's calibration (none when it calibrates every round)."""
        return 0 if self.config.calibrate_every_round else num_rounds - 1

    def share_request(
        self, state: ServerState, *, round_num: int, participants: Sequence[ClientId], run: RunContext
    ) -> ShareRequest | None:
        del participants
        if round_num == 0 or not (self.config.calibrate_every_round or round_num == run.num_rounds):
            return None
        # Paper: every client uploads its local statistics (not only the last round's participants).
        request = ShareRequest(round_num, list(range(run.num_clients)), state.model_state)
        return share_dp.attach(request, state.extra, self.dp, run)

    def client_share(self, request: ShareRequest, ctx: ClientContext) -> ClientShare:
        model = frozen_model(ctx, "share", request.model_state)
        idx: Tensor | None = None  # every sample (gaussian)
        if self.config.variant == "shared_features":
            # Paper is silent on the subset: a fresh random floor(alpha n) samples, as FLea's.
            n = ctx.data.num_examples
            idx = share_indices(n, self.config.share_fraction, ctx.generator, None, ctx.client_id)
        if self.dp is not None:
            return self._private_share(request, ctx, model, idx, self.dp)
        x, y = (ctx.data.x, ctx.data.y) if idx is None else (ctx.data.x[idx], ctx.data.y[idx])
        return self._exact_share(ctx.client_id, self._features(model, x), y.cpu())

    def _private_share(
        self,
        request: ShareRequest,
        ctx: ClientContext,
        model: SplitModel,
        drawn: Tensor | None,
        dp: gaussian.GaussianShare,
    ) -> ClientShare:
        """The upload under ``method.share_dp`` over the ``drawn`` samples (None: all) the budget still
        allows: noisy clipped features (``shared_features``) or noisy class statistics (``gaussian``)."""
        n = ctx.data.num_examples
        counts = share_dp.client_counts(request, ctx.client_id, n)
        drawn = torch.arange(n, device=ctx.data.y.device) if drawn is None else drawn
        idx, withheld = share_dp.gate(drawn, counts, dp)
        features, labels = self._features(model, ctx.data.x[idx]), ctx.data.y[idx].cpu()
        noise = share_dp.noise_generator(ctx, request.round_num)
        if self.config.variant == "shared_features":
            rows = share_dp.privatise(features, dp.clip, dp.noise_multiplier * dp.clip, noise)
            extra = SharedSamples(rows, labels).to_extra()
        else:
            classes, sizes, means, covs = private_class_statistics(
                features, labels, clip=dp.clip, noise_multiplier=dp.noise_multiplier, generator=noise
            )
            extra = ClassStatistics(classes, sizes, means.float(), covs.float()).to_extra()
        dp_extra, dp_metrics = share_dp.share_extra(counts, idx, withheld)
        return ClientShare(ctx.client_id, extra={**extra, **dp_extra}, metrics=dp_metrics)

    def _features(self, model: SplitModel, x: Tensor) -> Tensor:
        """Penultimate features of ``x`` on the host (what a client uploads), ``[n, d]``."""
        with torch.no_grad():
            chunks = [model.penultimate(chunk) for chunk in torch.split(x, 512)] if len(x) else []
        dim = model.classifier.in_features
        # Shares leave the client as host tensors (what it uploads); the per-class statistics are computed
        # on the CPU in float64 (ccvr_stats), and the server moves what it fits on to the run's device.
        return torch.cat(chunks).flatten(1).cpu() if chunks else torch.empty(0, dim)

    def _exact_share(self, client_id: ClientId, features: Tensor, labels: Tensor) -> ClientShare:
        """The paper's upload: the features and labels, or their per-class count, mean and covariance."""
        if self.config.variant == "shared_features":
            return ClientShare(client_id, extra=SharedSamples(features, labels).to_extra())
        classes, counts, means, covs = class_statistics(features, labels)
        stats = ClassStatistics(classes, counts, means.float(), covs.float())
        return ClientShare(client_id, extra=stats.to_extra())

    def receive_shares(
        self, state: ServerState, shares: Sequence[ClientShare], run: RunContext
    ) -> ServerState:
        generator = torch_generator(run.seed, "ccvr-calibrate", state.round_num)
        features, labels = self._calibration_set(shares, run, generator)
        weight, bias = state.model_state[CLASSIFIER_KEYS[0]], state.model_state[CLASSIFIER_KEYS[1]]
        cfg = self.config
        new_weight, new_bias, loss = fit_classifier(
            weight,
            bias,
            features,
            labels,
            epochs=cfg.calibration_epochs,
            lr=cfg.calibration_lr,
            momentum=cfg.calibration_momentum,
            batch_size=cfg.calibration_batch_size,
            generator=generator,
        )
        uploaded = sum(
            t.numel() * t.element_size() for s in shares for k, t in s.extra.items() if k != share_dp.COUNTS
        )
        calibration = Calibration(
            state.round_num,
            new_weight,
            new_bias,
            num_features=int(labels.shape[0]),
            loss=loss,
            bytes_up_per_client=uploaded / max(len(shares), 1),
        )
        extra = {**state.extra, **calibration.to_extra()}
        if self.dp is not None:
            extra = share_dp.receive(
                extra,
                shares,
                self.dp,
                round_num=state.round_num,
                num_clients=run.num_clients,
                shares_again=self.config.calibrate_every_round,
            )
        return replace(state, extra=extra)

    def _calibration_set(
        self, shares: Sequence[ClientShare], run: RunContext, generator: torch.Generator
    ) -> tuple[Tensor, Tensor]:
        """The features and labels the classifier is fitted on (virtual or shared real features), on
        ``run.device``."""
        device = run.device
        if self.config.variant == "shared_features":
            sent = [SharedSamples.from_extra(s.extra) for s in shares]
            parts = [samples for samples in sent if samples.y.numel() > 0]
            if not parts:
                return torch.empty(0, device=device), torch.empty(0, dtype=torch.long, device=device)
            features = torch.cat([samples.x.to(device) for samples in parts])
            return features, torch.cat([samples.y.to(device) for samples in parts])
        stats = [ClassStatistics.from_extra(s.extra) for s in shares]
        counts, means, covs = pool_statistics(stats, run.num_classes)
        return sample_virtual(counts, means, covs, self.config.virtual_per_class, generator, device)

    def eval_state(self, state: ServerState) -> StateDict:
        """The global weights with the calibrated classifier, if this round's calibration exists."""
        calibration = Calibration.from_extra(state.extra)
        if calibration.round_num != state.round_num:
            return state.model_state
        weight_key, bias_key = CLASSIFIER_KEYS
        return {**state.model_state, weight_key: calibration.weight, bias_key: calibration.bias}

    def round_metrics(self, state: ServerState) -> Metrics:
        calibration = Calibration.from_extra(state.extra)
        if calibration.round_num != state.round_num:
            return {}  # FedAvg's metrics exactly, so that a FedAvg run's rounds can stand for these
        return {
            "ccvr/calibrated": 1.0,
            "ccvr/num_features": float(calibration.num_features),
            "ccvr/calibration_loss": float(calibration.loss),
            "ccvr/bytes_up_per_client": float(calibration.bytes_up_per_client),
            **share_dp.round_metrics(state.extra, self.dp),
        }
