"""FLea: federated learning with privacy-preserving feature augmentation.

FLea: Addressing Data Scarcity and Label Skew in Federated Learning via Privacy-preserving Feature
Augmentation. T. Xia, A. Ghosh, X. Qiu, Y. Wu, J. Chauhan, T. Dang, C. Mascolo. KDD 2024. arXiv:2312.02327.

Differences from FedAvg. The server keeps a feature buffer of (activation, label) pairs: after aggregating
round t, every client of round t extracts activations at split layer l of an alpha fraction of its data with
the new global model and sends them; the buffer is replaced by their union (option: keep the last tau
rounds). In local training each local activation f_i = encoder(x_i) (with gradient) is mixed with a buffer
activation: f~ = b f_i + (1 - b) f^F, y~ = b onehot(y_i) + (1 - b) onehot(y^F), b ~ Beta(a, a) per sample,
and the loss is L = L_cls(soft-label CE on head(f~)) + lambda1 L_dis (KL between the local head and the
frozen global head on f~) + lambda2 L_dec (distance correlation between inputs and activations, which
obfuscates what is shared). Round 1 has an empty buffer: local CE + lambda2 L_dec.

``flea_official`` is FLea with the official code's departures as defaults (docs/methods/flea.md);
``configs/methods/flea_official.yaml`` adds its optimiser departures (Adam re-created every step, linear lr).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedaug.api import (
    ClientContext,
    ClientShare,
    ClientUpdate,
    MethodConfig,
    Payload,
    RunContext,
    ServerState,
    ShareRequest,
    TrainSettings,
)
from fedaug.errors import IncompatibleModelError
from fedaug.local_training import BatchableLoss, ClientTensors, LossFn, LossOutput
from fedaug.methods.checks import (
    check_at_least,
    check_choice,
    check_in_range,
    check_nonnegative,
    check_positive,
)
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.flea_buffer import BufferStream, exposure_update, share_indices
from fedaug.methods.losses import frozen_model, kl_divergence, one_hot, soft_cross_entropy
from fedaug.models.base import SplitModel
from fedaug.privacy.dcor import (
    DECOR_FORMS,
    decorrelation_loss,
    distance_correlation,
    u_distance_correlation_sqr,
)
from fedaug.registry import register
from fedaug.seeding import numpy_rng, torch_generator
from fedaug.types import Metrics


@dataclass(frozen=True)
class FLeaConfig(MethodConfig):
    """FLea's hyper-parameters (defaults: the KDD paper).

    Attributes:
        split_layer: layer l whose activations are shared (None: the model's ``default_split``).
        mix_beta: a of the symmetric Beta(a, a) mixing weights (paper: 2).
        mix_weight: a fixed mixing weight instead of Beta draws (ICLR Table 8 ablation); 1 = local only.
        distill_weight: lambda1 of L_dis (paper: 1; searched 0-4).
        decor_weight: lambda2 of L_dec (paper: 3; suggested 2-6).
        decor_form: ``dcor_squared`` (KDD Eq. 5), ``dcor`` (official code) or ``trace`` (ICLR draft).
        decor_schedule: ``constant`` (paper) or ``official``: max(lambda2 - 0.1 (t - 1), 1) in round t.
        share_fraction: alpha, the fraction of local data each client shares (paper: 0.1; floor, as official).
        share_sampling: ``fresh`` subset every time (paper) or ``fixed`` subset per client (official).
        buffer_rounds: tau, rounds of features kept in the buffer (paper: 1, the buffer resets every round).
        distill_on: ``mixed`` features (paper Eq. 4) or unmixed ``buffer`` features (official).
        distill_direction: ``local_global`` = KL(p_local || p_global) (paper Eq. 4) or ``global_local``
            (official, teacher first).
        local_ce_weight: weight of an extra plain CE on the local batch (paper: 0; official: 1).
        warmup: round 1 objective: ``paper`` (CE + lambda2 L_dec) or ``official`` (3x local epochs,
            CE + 0.5 KL(global || local) + lambda2(t) L_dec towards the untrained global model).
    """

    split_layer: int | None = None
    mix_beta: float = 2.0
    mix_weight: float | None = None
    distill_weight: float = 1.0
    decor_weight: float = 3.0
    decor_form: str = "dcor_squared"
    decor_schedule: str = "constant"
    share_fraction: float = 0.1
    share_sampling: str = "fresh"
    buffer_rounds: int = 1
    distill_on: str = "mixed"
    distill_direction: str = "local_global"
    local_ce_weight: float = 0.0
    warmup: str = "paper"

    def __post_init__(self) -> None:
        check_choice("decor_form", self.decor_form, DECOR_FORMS)
        check_choice("decor_schedule", self.decor_schedule, ("constant", "official"))
        check_choice("share_sampling", self.share_sampling, ("fresh", "fixed"))
        check_choice("distill_on", self.distill_on, ("mixed", "buffer"))
        check_choice("distill_direction", self.distill_direction, ("local_global", "global_local"))
        check_choice("warmup", self.warmup, ("paper", "official"))
        check_positive(self, ("mix_beta",))
        if self.mix_weight is not None:
            check_in_range(self, ("mix_weight",), 0, 1)
        check_in_range(self, ("share_fraction",), 0, 1)
        check_at_least(self, ("buffer_rounds",), 1)
        check_nonnegative(self, ("distill_weight", "decor_weight", "local_ce_weight"))


@register("method", "flea")
class FLea(FedAvg):
    """FLea. Client: mixes local activations with the received buffer's (see module docstring).

    Server: FedAvg aggregation, then asks the round's clients for fresh features and replaces the buffer.
    """

    name = "flea"
    config_cls = FLeaConfig
    config: FLeaConfig

    def layer(self, model: SplitModel) -> int:
        """The split layer for ``model`` (raises IncompatibleModelError naming the valid layers)."""
        layer = model.default_split if self.config.split_layer is None else self.config.split_layer
        return model.check_split(layer)

    def check(self, model: SplitModel, run: RunContext) -> None:
        """Refuses a ``split_layer`` the model does not have before any file of the run is written."""
        del run
        try:
            self.layer(model)
        except IncompatibleModelError as exc:
            raise IncompatibleModelError(f"method.split_layer: {exc}") from None

    def decor_weight(self, round_num: int) -> float:
        """lambda2 in ``round_num`` (constant, or the official schedule 3 -> 1 over rounds 1-21)."""
        if self.config.decor_schedule == "official":
            return max(self.config.decor_weight - 0.1 * (round_num - 1), 1.0)
        return self.config.decor_weight

    def init_server(self, model_state: dict[str, Tensor], run: RunContext) -> ServerState:
        extra = {**_empty_buffer(run.device), "num_clients": run.num_clients}
        return ServerState(round_num=0, model_state=model_state, extra=extra)

    def payload(self, state: ServerState, round_num: int, train: TrainSettings) -> Payload:
        if self.config.warmup == "official" and round_num == 1:
            train = replace(train, local_epochs=3 * train.local_epochs)
        extra = {"buffer_x": state.extra["buffer_x"], "buffer_y": state.extra["buffer_y"]}
        return Payload(round_num=round_num, model_state=state.model_state, train=train, extra=extra)

    def loss_fn(self, payload: Payload, ctx: ClientContext) -> LossFn:
        layer = self.layer(ctx.model)
        teacher = frozen_model(ctx, "teacher", payload.model_state) if self._needs_teacher(payload) else None
        decor = self.decor_weight(payload.round_num)
        buffer_y: Tensor = payload.extra["buffer_y"]
        if buffer_y.numel() == 0:
            return self._warmup_loss(layer, decor, teacher)
        # Mixing draws come from their own streams, so the batch order is the same as FedAvg's.
        rng = numpy_rng(ctx.run.seed, "flea-mix", payload.round_num, ctx.client_id)
        stream = BufferStream(
            buffer_y.shape[0],
            torch_generator(ctx.run.seed, "flea-buffer", payload.round_num, ctx.client_id),
            buffer_y.device,
        )
        return self._mix_loss(layer, decor, teacher, payload.extra["buffer_x"], buffer_y, stream, rng)

    def _needs_teacher(self, payload: Payload) -> bool:
        if payload.extra["buffer_y"].numel() == 0:
            return self.config.warmup == "official"
        return self.config.distill_weight > 0

    def _warmup_loss(self, layer: int, decor: float, teacher: SplitModel | None) -> LossFn:
        def loss_fn(
            module: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
        ) -> LossOutput:
            del client, step
            model = cast(SplitModel, module)
            f = model.encode(x, layer)
            logits = model.decode(f, layer)
            loss = F.cross_entropy(logits, y)
            logs = {"ce": loss.detach()}
            if teacher is not None:  # official warm-up: 0.5 KL(global || local) towards the initial model
                with torch.no_grad():
                    global_logits = teacher(x)
                kl = kl_divergence(global_logits, logits)
                loss = loss + 0.5 * kl
                logs["dis"] = kl.detach()
            return _add_decor(loss, logs, x, f, decor, self.config.decor_form)

        return BatchableLoss(loss_fn)  # the teacher is the broadcast model: the same for every client

    def _mix_loss(
        self,
        layer: int,
        decor: float,
        teacher: SplitModel | None,
        buffer_x: Tensor,
        buffer_y: Tensor,
        stream: BufferStream,
        rng: np.random.Generator,
    ) -> LossFn:
        cfg = self.config
        device = buffer_x.device

        def draws(size: int) -> ClientTensors:
            """One step's partners in the buffer and Beta weights, from this client's own streams (drawn on
            the CPU, the same on every device; moved to the buffer's device)."""
            idx = stream.take(size)
            return {"idx": idx, "lam": self._mix_weights(size, rng).to(device, non_blocking=True)}

        def loss_fn(
            module: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
        ) -> LossOutput:
            del client
            model = cast(SplitModel, module)
            f = model.encode(x, layer)
            idx, lam = step["idx"], step["lam"]
            fb, yb = buffer_x[idx], buffer_y[idx]
            num_classes = model.num_classes
            f_mix = _expand(lam, f) * f + _expand(1 - lam, f) * fb
            y_mix = lam[:, None] * one_hot(y, num_classes) + (1 - lam)[:, None] * one_hot(yb, num_classes)
            logits = model.decode(f_mix, layer)
            loss = soft_cross_entropy(logits, y_mix)
            logs = {"cls": loss.detach()}
            if teacher is not None:
                source = f_mix if cfg.distill_on == "mixed" else fb
                local = logits if cfg.distill_on == "mixed" else model.decode(fb, layer)
                with torch.no_grad():
                    global_logits = teacher.decode(source.detach(), layer)
                pair = (
                    (local, global_logits)
                    if cfg.distill_direction == "local_global"
                    else (global_logits, local)
                )
                kl = kl_divergence(*pair)
                loss = loss + cfg.distill_weight * kl
                logs["dis"] = kl.detach()
            if cfg.local_ce_weight > 0:
                ce = F.cross_entropy(model.decode(f, layer), y)
                loss = loss + cfg.local_ce_weight * ce
                logs["ce"] = ce.detach()
            return _add_decor(loss, logs, x, f, decor, cfg.decor_form)

        # The buffer and the teacher are the broadcast ones, the same for every client; the draws are its own.
        return BatchableLoss(loss_fn, draws=draws)

    def _mix_weights(self, size: int, rng: np.random.Generator) -> Tensor:
        """The local weights b of one batch, ``[size]`` float32 on the CPU (Beta(a, a) draws from ``rng``)."""
        if self.config.mix_weight is not None:
            return torch.full((size,), float(self.config.mix_weight))
        return torch.from_numpy(rng.beta(self.config.mix_beta, self.config.mix_beta, size=size)).float()

    def server_update(
        self, state: ServerState, updates: Sequence[ClientUpdate], run: RunContext
    ) -> ServerState:
        new = super().server_update(state, updates, run)
        receivers = [u.client_id for u in updates]
        pairs = exposure_update(
            state.extra["exposure_pairs"], state.extra["buffer_client"], receivers, run.num_clients
        )
        return replace(new, extra={**state.extra, "exposure_pairs": pairs})

    def share_request(
        self, state: ServerState, *, round_num: int, participants: Sequence[int], run: RunContext
    ) -> ShareRequest | None:
        if round_num == 0 or not participants or self.config.share_fraction == 0:
            return None
        return ShareRequest(round_num=round_num, client_ids=list(participants), model_state=state.model_state)

    def client_share(self, request: ShareRequest, ctx: ClientContext) -> ClientShare:
        model = frozen_model(ctx, "share", request.model_state)
        layer = self.layer(model)
        fixed_seed = ctx.run.seed if self.config.share_sampling == "fixed" else None
        idx = share_indices(
            ctx.data.num_examples, self.config.share_fraction, ctx.generator, fixed_seed, ctx.client_id
        )
        x, y = ctx.data.x[idx], ctx.data.y[idx]
        with torch.no_grad():
            features = model.encode(x, layer).contiguous()
        metrics: Metrics = {"num_shared": float(len(idx))}
        if len(idx) >= 2:
            metrics["dcor"] = distance_correlation(x, features)
        if len(idx) > 3:
            metrics["dcor_u"] = u_distance_correlation_sqr(x, features)
        return ClientShare(ctx.client_id, extra={"x": features, "y": y}, metrics=metrics)

    def receive_shares(
        self, state: ServerState, shares: Sequence[ClientShare], run: RunContext
    ) -> ServerState:
        # The buffer lives on the run's device, as it has since init_server (a resumed one: map_location);
        # the clients' features and labels are computed there, so moving them costs nothing.
        device = run.device
        extra = dict(state.extra)
        keep = extra["buffer_round"] > state.round_num - self.config.buffer_rounds
        parts = [s for s in shares if s.extra["y"].numel() > 0]
        new_x = [s.extra["x"].to(device) for s in parts]
        new_y = [s.extra["y"].to(device) for s in parts]
        feature_shape = new_x[0].shape[1:] if new_x else extra["buffer_x"].shape[1:]
        old_x = extra["buffer_x"][keep] if keep.any() else torch.empty(0, *feature_shape, device=device)
        extra["buffer_x"] = torch.cat([old_x, *new_x])
        extra["buffer_y"] = torch.cat([extra["buffer_y"][keep], *new_y])
        sources = [torch.full((len(s.extra["y"]),), s.client_id, device=device) for s in parts]
        extra["buffer_client"] = torch.cat([extra["buffer_client"][keep], *sources])
        rounds = torch.full((sum(len(y) for y in new_y),), state.round_num, device=device)
        extra["buffer_round"] = torch.cat([extra["buffer_round"][keep], rounds])
        extra["share_stats"] = _share_stats(shares)
        return replace(state, extra=extra)

    def round_metrics(self, state: ServerState) -> Metrics:
        extra = state.extra
        model_bytes = _nbytes(*state.model_state.values())
        buffer_bytes = _nbytes(extra["buffer_x"], extra["buffer_y"])
        stats = extra.get("share_stats", {})
        metrics: Metrics = {
            "flea/buffer_size": float(extra["buffer_y"].numel()),
            "flea/buffer_classes": torch.bincount(extra["buffer_y"]).tolist(),  # type: ignore[dict-item]
            "flea/exposure": extra["exposure_pairs"].numel() / extra["num_clients"] ** 2,
            "flea/bytes_down": float(model_bytes + buffer_bytes),
            "flea/bytes_up": float(model_bytes + stats.get("bytes_per_client", 0.0)),
            "flea/decor_weight": self.decor_weight(state.round_num),
        }
        metrics.update({f"flea/{k}": v for k, v in stats.items() if k != "bytes_per_client"})
        return metrics


def _nbytes(*tensors: Tensor) -> int:
    """Bytes of the tensors' data, as they would travel (features float32, labels int64)."""
    return sum(t.numel() * t.element_size() for t in tensors)


def _expand(weights: Tensor, like: Tensor) -> Tensor:
    return weights.view(-1, *([1] * (like.dim() - 1)))


def _add_decor(
    loss: Tensor, logs: dict[str, Tensor], x: Tensor, f: Tensor, weight: float, form: str
) -> LossOutput:
    if weight > 0:
        dec = decorrelation_loss(x, f, form=form)
        loss = loss + weight * dec
        logs["dec"] = dec.detach()
    return LossOutput(loss, logs)


def _empty_buffer(device: torch.device) -> dict[str, Tensor]:
    """The server's buffer before any sharing, on the run's ``device`` (where every later buffer lives)."""
    return {
        "buffer_x": torch.empty(0, device=device),
        "buffer_y": torch.empty(0, dtype=torch.long, device=device),
        "buffer_client": torch.empty(0, dtype=torch.long, device=device),
        "buffer_round": torch.empty(0, dtype=torch.long, device=device),
        "exposure_pairs": torch.empty(0, dtype=torch.long, device=device),
    }


def _share_stats(shares: Sequence[ClientShare]) -> dict[str, float]:
    """Means over sharing clients of dCor (plain and bias-corrected), and bytes each client uploaded."""
    stats: dict[str, float] = {}
    for key in ("dcor", "dcor_u"):
        values = [s.metrics[key] for s in shares if key in s.metrics and not math.isnan(s.metrics[key])]
        if values:
            stats[key] = sum(values) / len(values)
    total = sum(_nbytes(s.extra["x"], s.extra["y"]) for s in shares)
    stats["bytes_per_client"] = total / max(len(shares), 1)
    stats["shared_per_client"] = sum(s.metrics["num_shared"] for s in shares) / max(len(shares), 1)
    return stats


@dataclass(frozen=True)
class FLeaOfficialConfig(FLeaConfig):
    """FLea with the official code's departures (docs/methods/flea.md, "The authors' code") as defaults."""

    decor_form: str = "dcor"
    decor_schedule: str = "official"
    share_sampling: str = "fixed"
    distill_on: str = "buffer"
    distill_direction: str = "global_local"
    local_ce_weight: float = 1.0
    warmup: str = "official"


@register("method", "flea_official")
class FLeaOfficial(FLea):
    """FLea as the authors' code runs it (``configs/methods/flea_official.yaml`` adds the optimiser)."""

    name = "flea_official"
    config_cls = FLeaOfficialConfig
