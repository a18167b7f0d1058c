"""FedMix: clients share averages of groups of local samples and mix them into local training.

FedMix: Approximation of Mixup under Mean Augmented Federated Learning. T. Yoon, S. Shin, S. J. Hwang,
E. Yang. ICLR 2021. arXiv:2107.00233.

Differences from FedAvg. Before round 1 every client shuffles its data, cuts it into consecutive groups of
``mean_group_size`` (10) samples (full groups only), and shares each group's average input with its averaged
one-hot label; the server pools the averages (about 10% of N) and sends the pool to every client once. Local
training mixes every local batch with a batch of averages drawn from the pool (shuffled, cycling):

* ``mode: naive`` (default; the FLea papers' baseline, Yoon et al.'s NaiveMix): mix in input space,
  x~ = l x + (1 - l) x_bar, y~ = l onehot(y) + (1 - l) y_bar with l ~ Beta(2, 2), and minimise the soft-label
  cross-entropy of f(x~) against y~.
* ``mode: mafl`` (Yoon et al.'s FedMix loss, their first-order Taylor approximation of global Mixup): with
  lam = 1 - l the weight on the averages and u = (1 - lam) x,
  L = (1 - lam) CE(f(u), y) + lam CE(f(u), y_bar) + lam <dCE(f(u), y)/du, x_bar>,
  the input gradient taken per sample with autograd (``create_graph=True``, so the last term is trained too).

Aggregation is FedAvg's. A fixed ``mix_weight = 1`` (all weight on the local sample) is FedAvg.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

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
from fedaug.methods.flea.buffer import BufferStream
from fedaug.methods.parts import data_pool, share_dp
from fedaug.methods.parts.checks import check_at_least, check_choice, check_in_range, check_positive
from fedaug.methods.parts.losses import soft_cross_entropy
from fedaug.methods.parts.payloads import SharedSamples
from fedaug.privacy import gaussian
from fedaug.registry import register
from fedaug.runtime.device import host_to_device
from fedaug.runtime.seeding import numpy_rng, torch_generator
from fedaug.training.loop import (
    BatchableLoss,
    BatchTransform,
    ClientTensors,
    LossFn,
    LossOutput,
    cross_entropy_loss,
)
from fedaug.types import ClientId, Metrics

logger = logging.getLogger(__name__)

MODES = ("naive", "mafl")

_Draw = Callable[[int], tuple[Tensor, Tensor, Tensor]]
"""Given a batch size B: pool averages ``x_bar``, their labels ``y_bar`` and the local weights l [B]."""


@dataclass(frozen=True)
class FedMixConfig(MethodConfig):
    """FedMix's hyper-parameters (defaults: the FLea papers' FedMix baseline).

    Attributes:
        mode: ``naive`` (input-space mix with soft labels; the FLea papers and the official FLea code) or
            ``mafl`` (Yoon et al.'s approximate FedMix loss).
        mean_group_size: samples averaged into one shared mean (FLea papers: 10; Yoon et al. tune it).
        mix_beta: a of the Beta(a, a) law of the local weight l (FLea papers: 2).
        mix_weight: a fixed local weight l instead of Beta draws (1 = local only, i.e. FedAvg). Yoon et al.'s
            MAFL uses a fixed small weight on the averages, lam = 1 - l in 0.05-0.2.
        mix_per_sample: draw l per sample instead of once per batch (official FLea code: once per batch).
        share_dp: differential privacy for the shared averages, off by default (``epsilon``, ``delta``,
            ``clip``, ``noise_multiplier``, ``releases``; :mod:`fedaug.privacy.gaussian`): every input
            clipped to ``clip`` before averaging (so one sample moves its group's average by at most
            ``clip / mean_group_size``), noise of std ``noise_multiplier * clip / mean_group_size`` on each
            average; each sample is released once.
    """

    mode: str = "naive"
    mean_group_size: int = 10
    mix_beta: float = 2.0
    mix_weight: float | None = None
    mix_per_sample: bool = False
    share_dp: gaussian.ShareDPConfig = field(default_factory=gaussian.ShareDPConfig)

    def __post_init__(self) -> None:
        check_choice("mode", self.mode, MODES)
        check_at_least(self, ("mean_group_size",), 1)
        check_positive(self, ("mix_beta",))
        if self.mix_weight is not None:
            check_in_range(self, ("mix_weight",), 0, 1)


@register(
    "method",
    "fedmix",
    summary="FedAvg + shared averages of sample groups, mixed into every local batch",
    paper="Yoon et al., ICLR 2021",
)
class FedMix(FedAvg):
    """FedMix (NaiveMix by default, the approximate FedMix loss with ``mode: mafl``).

    Client: in the pre-training share phase, sends the averages of shuffled groups of ``mean_group_size``
    samples with averaged one-hot labels; in every round, mixes each local batch with pool averages (see the
    module docstring). Mixing draws come from their own random streams, so the batch order is FedAvg's.
    Server: pools the averages once; FedAvg aggregation. Logs ``fedmix/exposure`` (1.0 once everyone shared),
    the pool size and the bytes each client uploads and downloads once. Both modes can train a round's
    clients batched (``engine.batched_clients``): NaiveMix mixes in its batch transform, MAFL's pool partners
    and weights are per-step draws of its :class:`~fedaug.training.loop.BatchableLoss`.
    """

    name = "fedmix"
    config_cls = FedMixConfig
    config: FedMixConfig

    def __init__(self, config: FedMixConfig | None = None) -> None:
        super().__init__(config)
        if self.config.mode == "mafl" and self.config.mix_weight is None:
            logger.warning(
                "fedmix mode=mafl with Beta-drawn weights: the Taylor approximation assumes a small weight "
                "on the averages (Yoon et al. fix it: mix_weight 0.8-0.95)"
            )
        self.dp = gaussian.resolve(self.config.share_dp)
        """The shared averages' Gaussian mechanism (None: ``method.share_dp`` off)."""

    def init_server(self, model_state: dict[str, Tensor], run: RunContext) -> ServerState:
        extra = data_pool.empty_pool(run.input_shape, (run.num_classes,), torch.float32, device=run.device)
        if self.dp is not None:
            share_dp.warn_if_nothing_allowed(self.dp)
        return ServerState(round_num=0, model_state=model_state, extra=extra)

    def payload(self, state: ServerState, round_num: int, train: TrainSettings) -> Payload:
        return data_pool.pool_payload(state, round_num, train)

    def batch_transform(self, payload: Payload, ctx: ClientContext) -> BatchTransform | None:
        """NaiveMix: the mixed batch with soft labels (None in ``mafl`` mode or with an empty pool)."""
        if self.config.mode != "naive" or data_pool.DataPool.from_extra(payload.extra).y.shape[0] == 0:
            return None
        draw = self._partner_draws(payload, ctx)

        def mix(x: Tensor, y: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
            del generator  # the batch order's stream is left alone
            x_bar, y_bar, lam = draw(x.shape[0])
            y_onehot = F.one_hot(y, y_bar.shape[1]).to(x)
            return _mix(lam, x, x_bar.to(x)), _mix(lam, y_onehot, y_bar.to(x))

        return mix

    def loss_fn(self, payload: Payload, ctx: ClientContext) -> LossFn:
        if data_pool.DataPool.from_extra(payload.extra).y.shape[0] == 0:
            return cross_entropy_loss
        if self.config.mode == "naive":
            return _soft_label_loss
        return _mafl_loss(self._partner_draws(payload, ctx))

    def _partner_draws(self, payload: Payload, ctx: ClientContext) -> _Draw:
        """A function of the batch size: a cycling batch of pool averages and the local weights l, [B]."""
        pool = data_pool.DataPool.from_extra(payload.extra)
        pool_x, pool_y = pool.x, pool.y
        stream = BufferStream(
            pool_y.shape[0],
            torch_generator(ctx.run.seed, "fedmix-pool", payload.round_num, ctx.client_id),
            pool_y.device,
        )
        rng = numpy_rng(ctx.run.seed, "fedmix-mix", payload.round_num, ctx.client_id)
        cfg = self.config

        def draw(size: int) -> tuple[Tensor, Tensor, Tensor]:
            idx = stream.take(size)
            # The weights are drawn on the CPU (the same on every device) and moved where the pool is.
            weights = host_to_device(_local_weights(cfg, size, rng), pool_x.device)
            return pool_x[idx], pool_y[idx], weights

        return draw

    def share_request(
        self, state: ServerState, *, round_num: int, participants: Sequence[ClientId], run: RunContext
    ) -> ShareRequest | None:
        del participants
        return share_dp.attach(data_pool.pool_request(state, round_num, run), state.extra, self.dp, run)

    def client_share(self, request: ShareRequest, ctx: ClientContext) -> ClientShare:
        if self.dp is not None:
            return self._private_share(request, ctx, self.dp)
        x_bar, y_bar = group_means(
            ctx.data.x, ctx.data.y, ctx.run.num_classes, self.config.mean_group_size, ctx.generator
        )
        shared = SharedSamples(x_bar, y_bar)
        return ClientShare(ctx.client_id, extra=shared.to_extra(), metrics={"num_shared": float(len(y_bar))})

    def _private_share(
        self, request: ShareRequest, ctx: ClientContext, dp: gaussian.GaussianShare
    ) -> ClientShare:
        """The averages of groups of clipped inputs plus noise (:func:`share_dp.group_means`), with the
        averaged one-hot labels of the same groups (in the clear)."""
        group = self.config.mean_group_size
        x_bar, used, dp_extra, metrics = share_dp.group_means(request, ctx, dp, group)
        onehot = F.one_hot(ctx.data.y[used], ctx.run.num_classes).float()
        y_bar = onehot.view(x_bar.shape[0], group, ctx.run.num_classes).mean(dim=1)
        extra = {**SharedSamples(x_bar, y_bar).to_extra(), **dp_extra}
        return ClientShare(ctx.client_id, extra=extra, metrics=metrics)

    def receive_shares(
        self, state: ServerState, shares: Sequence[ClientShare], run: RunContext
    ) -> ServerState:
        new = data_pool.receive_pool(state, shares, run)
        if self.dp is None:
            return new
        extra = share_dp.receive(
            new.extra,
            shares,
            self.dp,
            round_num=state.round_num,
            num_clients=run.num_clients,
            shares_again=False,  # FedMix shares once, before round 1
        )
        return ServerState(round_num=new.round_num, model_state=new.model_state, extra=extra)

    def round_metrics(self, state: ServerState) -> Metrics:
        metrics = data_pool.pool_metrics("fedmix", state.extra)
        metrics.update(share_dp.round_metrics(state.extra, self.dp))
        return metrics


def group_means(
    x: Tensor, y: Tensor, num_classes: int, group_size: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Averages of consecutive groups of ``group_size`` shuffled samples, with averaged one-hot labels.

    Only full groups are kept (floor(n / group_size) means; the official code's ``send_data(fre=10)``).

    Returns:
        ``(x_bar [G, ...], y_bar [G, num_classes])`` in float32.
    """
    count = x.shape[0] // group_size
    order = torch.randperm(x.shape[0], generator=generator)[: count * group_size]
    x_bar = x[order].float().view(count, group_size, *x.shape[1:]).mean(dim=1)
    y_bar = F.one_hot(y[order], num_classes).float().view(count, group_size, num_classes).mean(dim=1)
    return x_bar, y_bar


def _local_weights(cfg: FedMixConfig, size: int, rng: np.random.Generator) -> Tensor:
    """The local weights l, shape [size] on the CPU: fixed, one Beta draw per batch (official code) or per
    sample."""
    if cfg.mix_weight is not None:
        return torch.full((size,), float(cfg.mix_weight))
    # Paper is silent on per-batch vs per-sample weights: one per batch, as the official FLea code.
    draws = rng.beta(cfg.mix_beta, cfg.mix_beta, size=size if cfg.mix_per_sample else 1)
    return torch.from_numpy(draws).float().expand(size).contiguous()


def _rows(weights: Tensor, like: Tensor) -> Tensor:
    """``weights [B]`` shaped to broadcast over the rows of ``like``."""
    return weights.view(-1, *([1] * (like.dim() - 1))).to(device=like.device, dtype=like.dtype)


def _mix(lam: Tensor, local: Tensor, shared: Tensor) -> Tensor:
    """``lam * local + (1 - lam) * shared`` with one weight per sample (row)."""
    weight = _rows(lam, local)
    return weight * local + (1 - weight) * shared


def _soft_label_objective(
    model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
) -> LossOutput:
    """Soft-label cross-entropy on a mixed batch (``y`` holds the mixed label distributions)."""
    del client, step
    loss = soft_cross_entropy(model(x), y)
    return LossOutput(loss, {"ce": loss.detach()})


_soft_label_loss = BatchableLoss(_soft_label_objective, masked=True)  # the mixing is the batch transform's


def _mafl_loss(draw: _Draw) -> LossFn:
    """Yoon et al.'s approximate FedMix loss (module docstring), batch mean.

    # Deviation from paper: Yoon et al. average the loss over all received means j; it is linear in
    # (x_bar_j, y_bar_j), so pairing each sample with one cycling pool mean (as NaiveMix does) is an unbiased
    # estimate of that average.
    """

    def draws(size: int) -> ClientTensors:
        """One step's pool averages, their labels and local weights, from this client's own streams."""
        x_bar, y_bar, local_weight = draw(size)
        return {"x_bar": x_bar, "y_bar": y_bar, "local_weight": local_weight}

    def loss_fn(
        model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
    ) -> LossOutput:
        del client
        x_bar, y_bar, local_weight = step["x_bar"].to(x), step["y_bar"].to(x), step["local_weight"].to(x)
        lam = 1 - local_weight  # Yoon et al.'s lambda: the weight on the averages
        scaled = _rows(local_weight, x) * x  # (1 - lam) x

        def local_ce(u: Tensor, buffers: dict[str, Tensor]) -> tuple[Tensor, tuple[Tensor, Tensor]]:
            log_probs = F.log_softmax(functional_call(model, buffers, (u,)), dim=1)
            ce_local = -log_probs.gather(1, y[:, None]).squeeze(1)  # per sample
            return ce_local.sum(), (log_probs, ce_local)

        # Per-sample input gradients of CE(f(u), y) (a sum keeps each sample's gradient unscaled), kept in
        # the graph so the Taylor term is trained. With batch norm in train mode samples are coupled.
        # torch.func.grad, not torch.autograd.grad, so that it also runs inside the batched clients' vmap;
        # the buffers are its explicit inputs because batch norm updates them in place (a transform refuses
        # to mutate a tensor it captured).
        buffers = dict(model.named_buffers())
        grad, (log_probs, ce_local) = torch.func.grad(local_ce, has_aux=True)(scaled, buffers)
        ce_mean = -(y_bar * log_probs).sum(dim=1)
        taylor = (grad.flatten(1) * x_bar.flatten(1)).sum(dim=1)
        loss = ((1 - lam) * ce_local + lam * ce_mean + lam * taylor).mean()
        logs = {"ce": ce_local.mean().detach(), "ce_mean": ce_mean.mean().detach()}
        logs["taylor"] = taylor.mean().detach()
        return LossOutput(loss, logs)

    # The pool is the broadcast one, the same for every client, and only the draws read it: the step's
    # tensors are all in ``step``, so one round's recorded steps serve every later round.
    return BatchableLoss(loss_fn, draws=draws, rounds_key=())
