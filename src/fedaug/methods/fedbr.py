"""FedBR: local learning bias reduction with shared, label-free mini-batch averages.

FedBR: Improving Federated Learning on Heterogeneous Data via Local Learning Bias Reduction. Y. Guo, X. Tang,
T. Lin. ICML 2023. arXiv:2205.13462. FLea papers, appendix C.3: "32 mini-batch data averages without class
labels as data augmentation; a min-max algorithm where the max step makes local features for all classes more
distinguishable and the min step enforces the local classifier to predict uniform probabilities for the
global data averages".

Protocol. Before round 1 every client shares the averages of shuffled groups of ``average_size`` local samples
(no labels); the server keeps ``num_pseudo`` of them (seeded draw) as the global pseudo-data and sends them
with every round's model. Local step on a batch (x, y) with a batch of pseudo-data p (cycling, one per local
sample):

* classifier bias reduction: ``lambda_uniform * softCE(f(p), uniform)``;
* feature bias reduction (min-max contrastive): a small discriminator D (an MLP on penultimate features)
  embeds e1 = D(h(p)) (local model), e2 = D(h_global(p)) (frozen global model), e3 = D(h(x)), and
  ``l = log softmax([tau*cos(e1, e2), tau*cos(e1, e3)])[0]``. D takes one Adam step to *minimise* mean l
  (inputs detached: the max step, it pulls the pseudo-features towards the local features); the model then
  minimises ``CE(f(x), y) - mu * mean l``, pulling the local pseudo-features towards the global model's
  and away from the local data's.

Defaults are the values of the FedBR entry in the official FLea code (mu = 0.5, lambda = 0.8, tau = 2).
Aggregation is FedAvg's; D is local and never leaves the client.

``method.share_dp`` (off by default) shares the averages as FedMix does under it
(:func:`fedaug.methods.parts.share_dp.group_means`): every input clipped to ``clip`` before averaging, noise
of std ``noise_multiplier * clip / average_size`` on each average, each sample released once; the server's
choice of ``num_pseudo`` of them is post-processing and spends nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedaug.api import (
    ClientContext,
    ClientShare,
    MethodConfig,
    Payload,
    RunContext,
    ServerState,
    ShareRequest,
    TrainSettings,
)
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.fedmix import group_means
from fedaug.methods.flea.buffer import BufferStream
from fedaug.methods.parts import data_pool, share_dp
from fedaug.methods.parts.checks import check_at_least, check_nonnegative
from fedaug.methods.parts.losses import features_and_logits, frozen_model, soft_cross_entropy
from fedaug.methods.parts.payloads import SharedSamples
from fedaug.privacy import gaussian
from fedaug.registry import register
from fedaug.runtime.seeding import torch_generator, uninitialised
from fedaug.training.loop import LossFn, LossOutput, cross_entropy_loss
from fedaug.types import ClientId, Extra, Metrics


@dataclass(frozen=True)
class FedBRConfig(MethodConfig):
    """FedBR's hyper-parameters (defaults: the official FLea code's FedBR entry).

    Attributes:
        num_pseudo: pseudo-data (shared averages) the server keeps (FLea papers: 32).
        average_size: local samples averaged into one pseudo-sample (a "mini-batch average"; the official FLea
            code averages groups of 10, the FedBR paper mini-batches; default 32 = the local batch size).
        contrastive_mu: weight mu of the feature-bias term -mean l (FLea code: 0.5).
        uniform_lambda: weight of the soft CE towards uniform predictions on pseudo-data (FLea code: 0.8).
        temperature: scale tau of the cosine similarities in l (FLea code: 2).
        disc_width: hidden and output width of the discriminator MLP (FLea code: 256).
        mix_with_local: pair each pseudo-sample with a local sample, u = (p + x)/2 with target
            (uniform + onehot(y))/2, as the official FLea code does (off: use p itself, as the FLea papers
            describe).
        share_dp: differential privacy for the shared averages, off by default (``epsilon``, ``delta``,
            ``clip``, ``noise_multiplier``, ``releases``; :mod:`fedaug.privacy.gaussian`): every input
            clipped to ``clip`` before averaging, noise of std ``noise_multiplier * clip / average_size``
            on each average; each sample is released once.
    """

    num_pseudo: int = 32
    average_size: int = 32
    contrastive_mu: float = 0.5
    uniform_lambda: float = 0.8
    temperature: float = 2.0
    disc_width: int = 256
    mix_with_local: bool = False
    share_dp: gaussian.ShareDPConfig = field(default_factory=gaussian.ShareDPConfig)

    def __post_init__(self) -> None:
        check_at_least(self, ("num_pseudo", "average_size", "disc_width"), 1)
        check_nonnegative(self, ("contrastive_mu", "uniform_lambda", "temperature"))


@register(
    "method",
    "fedbr",
    summary="FedAvg + shared label-free sample averages and a min-max local bias reduction",
    paper="Guo et al., ICML 2023",
)
class FedBR(FedAvg):
    """FedAvg plus FedBR's two bias-reduction terms on shared pseudo-data (module docstring).

    Logs ``train/ce``, ``train/uniform``, ``train/contrast`` (mean l) and ``fedbr/*`` pool metrics.
    With ``contrastive_mu = uniform_lambda = 0`` the model's gradients are FedAvg's (the extra forward passes
    still update batch-norm running statistics).
    """

    name = "fedbr"
    config_cls = FedBRConfig
    config: FedBRConfig

    def __init__(self, config: FedBRConfig | None = None) -> None:
        super().__init__(config)
        self.dp = gaussian.resolve(self.config.share_dp)
        """The shared averages' Gaussian mechanism (None: ``method.share_dp`` off)."""

    def init_server(self, model_state: dict[str, Tensor], run: RunContext) -> ServerState:
        extra = data_pool.empty_pool(run.input_shape, (run.num_classes,), torch.float32, device=run.device)
        if self.dp is not None:
            share_dp.warn_if_nothing_allowed(self.dp)
        return ServerState(round_num=0, model_state=model_state, extra=extra)

    def payload(self, state: ServerState, round_num: int, train: TrainSettings) -> Payload:
        return data_pool.pool_payload(state, round_num, train)

    def share_request(
        self, state: ServerState, *, round_num: int, participants: Sequence[ClientId], run: RunContext
    ) -> ShareRequest | None:
        del participants
        return share_dp.attach(data_pool.pool_request(state, round_num, run), state.extra, self.dp, run)

    def client_share(self, request: ShareRequest, ctx: ClientContext) -> ClientShare:
        dp_extra: Extra = {}
        if self.dp is not None:
            x_bar, _, dp_extra, metrics = share_dp.group_means(
                request, ctx, self.dp, self.config.average_size
            )
        else:
            x_bar, _ = group_means(
                ctx.data.x, ctx.data.y, ctx.run.num_classes, self.config.average_size, ctx.generator
            )
            metrics = {"num_shared": float(len(x_bar))}
        # No labels leave the client: the pool holds uniform label vectors.
        uniform = torch.full(
            (x_bar.shape[0], ctx.run.num_classes), 1.0 / ctx.run.num_classes, device=x_bar.device
        )
        extra = {**SharedSamples(x_bar, uniform).to_extra(), **dp_extra}
        return ClientShare(ctx.client_id, extra=extra, metrics=metrics)

    def receive_shares(
        self, state: ServerState, shares: Sequence[ClientShare], run: RunContext
    ) -> ServerState:
        round_num = state.round_num
        state = data_pool.receive_pool(state, shares, run)
        if self.dp is not None:  # FedBR shares once, before round 1
            extra = share_dp.receive(
                state.extra,
                shares,
                self.dp,
                round_num=round_num,
                num_clients=run.num_clients,
                shares_again=False,
            )
            state = replace(state, extra=extra)
        pool = data_pool.DataPool.from_extra(state.extra)
        total = pool.y.shape[0]
        keep = torch.randperm(total, generator=torch_generator(run.seed, "fedbr-pseudo"))
        keep = keep[: self.config.num_pseudo].sort().values
        pseudo = data_pool.DataPool(pool.x[keep], pool.y[keep])
        return replace(state, extra={**state.extra, **pseudo.to_extra()})

    def round_metrics(self, state: ServerState) -> Metrics:
        return {
            **data_pool.pool_metrics("fedbr", state.extra),
            **share_dp.round_metrics(state.extra, self.dp),
        }

    def loss_fn(self, payload: Payload, ctx: ClientContext) -> LossFn:
        pool_x = data_pool.DataPool.from_extra(payload.extra).x
        if pool_x.shape[0] == 0:
            return cross_entropy_loss
        cfg = self.config
        teacher = frozen_model(ctx, "global", payload.model_state)
        stream = BufferStream(
            pool_x.shape[0],
            torch_generator(ctx.run.seed, "fedbr-pool", payload.round_num, ctx.client_id),
            pool_x.device,
        )
        # Deviation from paper: D is re-initialised (seeded) at every participation instead of persisting on
        # the client across rounds (clients take part about once in 10 rounds; this keeps clients stateless),
        # and its Adam state lives through the round (the official FLea code rebuilds both optimisers every
        # step). Every client shares averages (the official FLea code asks only 10 clients, a bug).
        # D is initialised on the CPU (the same weights on every device), then moved to the model's device.
        classifier = ctx.model.classifier
        disc = discriminator(
            classifier.in_features,
            cfg.disc_width,
            torch_generator(ctx.run.seed, "fedbr-disc", payload.round_num, ctx.client_id),
        ).to(classifier.weight)  # the model's device and dtype
        disc_opt = torch.optim.Adam(disc.parameters(), lr=payload.train.lr)
        num_classes = ctx.run.num_classes

        # Not a BatchableLoss (engine.batched_clients trains FedBR client by client): D and its Adam state are
        # per-client state that every step updates, and the batched engine carries no such state across steps.
        def loss(model: nn.Module, x: Tensor, y: Tensor) -> LossOutput:
            pseudo = pool_x[stream.take(x.shape[0])].to(x)
            uniform = torch.full((x.shape[0], num_classes), 1.0 / num_classes, dtype=x.dtype, device=x.device)
            if cfg.mix_with_local:
                pseudo = (pseudo + x) / 2
                uniform = (uniform + F.one_hot(y, num_classes).to(x)) / 2
            h_x, logits_x = features_and_logits(model, x)
            h_p, logits_p = features_and_logits(model, pseudo)
            with torch.no_grad():
                h_global = teacher.penultimate(pseudo)
            # Max step: the discriminator minimises mean l on detached features.
            disc_opt.zero_grad(set_to_none=True)
            disc_loss = contrast_log_ratio(disc, h_p.detach(), h_global, h_x.detach(), cfg.temperature)
            disc_loss.backward()  # type: ignore[no-untyped-call]
            disc_opt.step()
            disc.zero_grad(set_to_none=True)
            ce = F.cross_entropy(logits_x, y)
            uniform_ce = soft_cross_entropy(logits_p, uniform)
            log_ratio = contrast_log_ratio(disc, h_p, h_global, h_x, cfg.temperature)
            total = ce + cfg.uniform_lambda * uniform_ce - cfg.contrastive_mu * log_ratio
            logs = {"ce": ce.detach(), "uniform": uniform_ce.detach(), "contrast": log_ratio.detach()}
            return LossOutput(total, logs)

        return loss


def discriminator(in_features: int, width: int, generator: torch.Generator) -> nn.Sequential:
    """FedBR's discriminator MLP ``in -> width -> ReLU -> width`` on the CPU, initialised from ``generator``.

    PyTorch's default Linear init (uniform in +-1/sqrt(fan_in)), drawn from the given (CPU) stream so the
    global RNG is never touched; the caller moves it to its device.
    """
    layers = (uninitialised(nn.Linear, in_features, width), uninitialised(nn.Linear, width, width))
    with torch.no_grad():
        for layer in layers:
            bound = 1.0 / math.sqrt(layer.in_features)
            layer.weight.uniform_(-bound, bound, generator=generator)
            layer.bias.uniform_(-bound, bound, generator=generator)
    return nn.Sequential(layers[0], nn.ReLU(), layers[1])


def contrast_log_ratio(
    disc: nn.Module, h_local: Tensor, h_global: Tensor, h_data: Tensor, temperature: float
) -> Tensor:
    """Mean over rows of ``log softmax([tau cos(e1, e2), tau cos(e1, e3)])[0]`` with e = disc(h).

    e1 = disc(h_local) (local model's features of pseudo-data), e2 = disc(h_global) (global model's), e3 =
    disc(h_data) (local model's features of local data); rows are paired.
    """
    e1, e2, e3 = disc(h_local), disc(h_global), disc(h_data)
    sims = torch.stack([F.cosine_similarity(e1, e2, dim=1), F.cosine_similarity(e1, e3, dim=1)], dim=1)
    return F.log_softmax(temperature * sims, dim=1)[:, 0].mean()
