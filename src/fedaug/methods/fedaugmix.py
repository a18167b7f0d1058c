"""Fed-AugMix: AugMix views and a Jensen-Shannon consistency loss, on top of a loss-based method.

Fed-AugMix: Balancing Privacy and Utility via Data Augmentation (full text: ``../shared/papers/
fed-augmix.txt``), built on AugMix (Hendrycks et al., ICLR 2020, arXiv:1912.02781).

Difference from the base method (FedAvg for ``fedaugmix``, FedProx for ``fedprox_augmix``, and likewise
``feddecorr_augmix``, ``fedlc_augmix``, ``fedntd_augmix``, ``fedrs_augmix``, ``moon_augmix``): every local
batch is extended by two AugMix views of each image (:class:`fedaug.augment.AugMix`, the ``batch_transform``
hook), and the local objective becomes ``base_loss(original) + lambda * JS(p_orig, p_aug1, p_aug2)`` (the
``loss_fn`` hook wraps the base method's own loss, so FedProx's proximal term, or any other base term, is
kept unchanged). Loss scaling (Sec. IV-E): while ``CE > kappa * JS`` on the batch, lambda is the large
``scaled_lambda`` (Lambda), which puts the AugMix noise into the update while the JS term is still tiny
(early training, where gradient inversion works best); otherwise the configured ``js_lambda``. Server
aggregation is the base method's.

The base method's forward pass on the originals is reused for ``p_orig``: a forward hook on the model's
classifier records the logits the base loss computes, and one more forward pass gives the two views'.

Batched clients (``engine.batched_clients``): the wrapped loss is a
:class:`~fedaug.training.loop.BatchableLoss` whenever the base method's is, so a variant batches exactly when
its base method does (the AugMix views are a batch transform, made per client before stacking).

Deviation from AugMix reference code: the originals and the views go through two forward passes (the base
loss's own and one for the views) instead of one batch of 3B, so batch-norm layers normalise them
separately; models without batch norm (LeNet-5) are unaffected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedaug.api import ClientContext, Method, MethodConfig, Payload, RunContext
from fedaug.augment import AugMix
from fedaug.errors import IncompatibleModelError
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.feddecorr import FedDecorr
from fedaug.methods.fedlc import FedLC
from fedaug.methods.fedntd import FedNTD
from fedaug.methods.fedprox import FedProx
from fedaug.methods.fedrs import FedRS
from fedaug.methods.moon import MOON
from fedaug.methods.parts.checks import check_nonnegative
from fedaug.methods.parts.losses import jensen_shannon
from fedaug.models.base import SplitModel
from fedaug.registry import register
from fedaug.training.loop import (
    BatchableLoss,
    BatchTransform,
    ClientTensors,
    LossFn,
    LossOutput,
    as_batchable,
)
from fedaug.training.objective import hook_code

AUGMIX_PAPER = "Fed-AugMix paper; AugMix: Hendrycks et al., ICLR 2020"
"""The papers every ``*augmix`` method follows (what ``fedaug list methods`` cites)."""

WITH_AUGMIX = " + Fed-AugMix's AugMix views and Jensen-Shannon loss"
"""What an AugMix variant adds to its base method, in ``fedaug list methods``."""


@dataclass(frozen=True)
class AugMixJSConfig(MethodConfig):
    """The Fed-AugMix options (shared by every ``*augmix`` method).

    Attributes:
        severity: AugMix severity 0..10 (0: no augmentation, the views equal the originals). Default 3,
            the AugMix reference default; the paper sweeps the severity (its values are lost in extraction).
        width: augmentation chains per view (paper: 3).
        depth: operations per chain; -1 draws 1..3 per chain (paper).
        js_lambda: weight lambda of the JS term. Default 12, the AugMix reference's weight.
        scaled_lambda: Lambda, the weight while ``CE > kappa * JS`` when ``loss_scaling`` is on. Default 100.
        scaling_kappa: kappa of the loss-scaling condition (paper: 50).
        loss_scaling: apply the loss-scaling rule (paper: on).
    """

    # Deviation from paper: the paper's lambda and Lambda are lost in the text we have ("we set [lambda] to
    # [?], [Lambda] to [?], and [kappa] to 50"); lambda = 12 is AugMix's, and Lambda = 100 makes the JS term
    # comparable to CE at an untrained model (where JS is ~1e-3..1e-2 and CE ~2.3).
    severity: float = 3.0
    width: int = 3
    depth: int = -1
    js_lambda: float = 12.0
    scaled_lambda: float = 100.0
    scaling_kappa: float = 50.0
    loss_scaling: bool = True

    def __post_init__(self) -> None:
        # Cooperative: a variant's config (AugMixJSConfig, <Base>Config) checks its base's options first.
        check_base = getattr(super(), "__post_init__", None)
        if check_base is not None:
            check_base()
        AugMix(severity=self.severity, width=self.width, depth=self.depth)  # validates the AugMix options
        check_nonnegative(self, ("js_lambda", "scaled_lambda", "scaling_kappa"))


def scheduled_lambda(ce: Tensor, js: Tensor, config: AugMixJSConfig) -> Tensor:
    """The JS weight of one batch: ``scaled_lambda`` while ``CE > kappa * JS`` (loss scaling), else lambda."""
    base = torch.full_like(js, config.js_lambda)
    if not config.loss_scaling:
        return base
    return torch.where(ce > config.scaling_kappa * js, torch.full_like(js, config.scaled_lambda), base)


def augmix_for(config: AugMixJSConfig, run: RunContext) -> AugMix:
    """The AugMix of ``config`` with the run's input normalisation.

    Raises:
        IncompatibleModelError: when the run's inputs are not images ``[C, H, W]`` (by shape, or by the
            dataset's modality: UCI-HAR's ``[1, 128, 3]`` windows are signals).
    """
    if len(run.input_shape) != 3 or run.input_modality != "image":
        raise IncompatibleModelError(
            f"AugMix needs image inputs [C, H, W] (its rotations, shears and translations act on pixels), "
            f"but this dataset's inputs are {run.input_modality} of shape {run.input_shape}"
        )
    return AugMix(
        severity=config.severity,
        width=config.width,
        depth=config.depth,
        mean=run.input_mean,
        std=run.input_std,
    )


def augmix_views_transform(augmix: AugMix) -> BatchTransform:
    """``(x, y) -> (cat[x, view1, view2], cat[y, y, y])``: the batch and its two AugMix views."""

    def transform(x: Tensor, y: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        views = augmix.views(x, generator, num_views=2)
        return torch.cat([x, views.flatten(0, 1)]), y.repeat(3)

    return transform


@contextmanager
def recorded_logits(model: nn.Module) -> Iterator[list[Tensor]]:
    """Records every output of the model's classifier (or of the model, if it has none) while active."""
    outputs: list[Tensor] = []
    classifier = getattr(model, "classifier", None)
    target = classifier if isinstance(classifier, nn.Module) else model

    def hook(module: nn.Module, inputs: Any, output: Tensor) -> None:
        del module, inputs
        outputs.append(output)

    handle = target.register_forward_hook(hook)
    try:
        yield outputs
    finally:
        handle.remove()


def js_consistency_loss(base_loss: LossFn, config: AugMixJSConfig) -> LossFn:
    """Wraps ``base_loss`` for batches ``cat[x, view1, view2]``: base loss on x plus lambda * JS.

    Logs the base method's parts plus ``js`` (the divergence), ``js_lambda`` (the weight used) and
    ``ce_orig`` (cross-entropy on the originals, the loss-scaling condition's CE).

    When ``base_loss`` is a :class:`~fedaug.training.loop.BatchableLoss` (or plain cross-entropy), so is the
    result, and the variant trains batched (``engine.batched_clients``) exactly when its base method does:
    the base's per-client constants pass through unchanged, and its per-step draws are made for the B
    originals of each 3B batch, as the base loss makes them when called on the originals.
    """
    base = as_batchable(base_loss)
    if base is None:

        def loss(model: nn.Module, x: Tensor, y: Tensor) -> LossOutput:
            return _with_js(base_loss, model, x, y, config)

        return loss
    base_fn, base_draws = base.fn, base.draws

    def objective(
        model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
    ) -> LossOutput:
        def on_originals(module: nn.Module, x_orig: Tensor, y_orig: Tensor) -> LossOutput:
            return base_fn(module, x_orig, y_orig, client, step)

        return _with_js(on_originals, model, x, y, config)

    # recordings serve later rounds when the base's do: the wrapper adds config numbers only
    key = None if base.rounds_key is None else (hook_code(base_fn), base.rounds_key)
    if base_draws is None:
        return BatchableLoss(objective, base.client, rounds_key=key)
    draws = base_draws  # a local of the narrowed type, for the closure

    def views_draws(size: int) -> ClientTensors:
        return draws(size // 3)  # the batch holds the originals and their two views

    return BatchableLoss(objective, base.client, views_draws, rounds_key=key)


def _with_js(base_loss: LossFn, model: nn.Module, x: Tensor, y: Tensor, config: AugMixJSConfig) -> LossOutput:
    """``base_loss`` on the originals of ``x = cat[x, view1, view2]`` plus lambda * JS (see
    :func:`js_consistency_loss`). Only shapes steer it (no tensor value), so it also runs under ``vmap``."""
    batch = x.shape[0] // 3
    x_orig, y_orig = x[:batch], y[:batch]
    with recorded_logits(model) as outputs:
        base = base_loss(model, x_orig, y_orig)
    logits = [out for out in outputs if out.shape[0] == batch]
    if not logits:
        raise IncompatibleModelError("the base method's loss never ran the model on the original batch")
    logits_views = model(x[batch:])
    js = jensen_shannon(logits[0], *logits_views.chunk(2))
    ce = F.cross_entropy(logits[0].detach(), y_orig)
    weight = scheduled_lambda(ce, js.detach(), config)
    logs = {**base.logs, "js": js.detach(), "js_lambda": weight, "ce_orig": ce}
    return LossOutput(base.loss + weight * js, logs)


class AugMixJSMethod(FedAvg):
    """The Fed-AugMix hooks on top of whatever loss-based method follows it in the bases.

    ``loss_fn`` wraps the next class's loss (``super()``) with :func:`js_consistency_loss`, and
    ``batch_transform`` adds the two AugMix views; aggregation, client state and everything else stay the base
    method's. A variant is ``class <Base>AugMix(AugMixJSMethod, <Base>)``, made by :func:`augmix_variant`
    (``FedProxAugMix``, ...); :class:`FedAugMix` is the one on FedAvg.
    """

    config: AugMixJSConfig

    def check(self, model: SplitModel, run: RunContext) -> None:
        """Refuses inputs that are not images (UCI-HAR's signal windows) before the run starts."""
        super().check(model, run)
        augmix_for(self.config, run)

    def loss_fn(self, payload: Payload, ctx: ClientContext) -> LossFn:
        return js_consistency_loss(super().loss_fn(payload, ctx), self.config)

    def batch_transform(self, payload: Payload, ctx: ClientContext) -> BatchTransform | None:
        return augmix_views_transform(augmix_for(self.config, ctx.run))


@dataclass(frozen=True)
class FedAugMixConfig(AugMixJSConfig):
    """Fed-AugMix on FedAvg: the AugMix/JS options only (see :class:`AugMixJSConfig`)."""


@register(
    "method",
    "fedaugmix",
    summary="FedAvg + two AugMix views per image and a Jensen-Shannon consistency loss",
    paper=AUGMIX_PAPER,
)
class FedAugMix(AugMixJSMethod):
    """FedAvg with AugMix views and the JS consistency loss (Fed-AugMix, the paper's main variant).

    Client: each batch plus two AugMix views per image; loss ``CE(x) + lambda * JS`` with loss scaling.
    Server: FedAvg's weighted mean.
    """

    name = "fedaugmix"
    config_cls = FedAugMixConfig
    config: FedAugMixConfig


# The paper composes Fed-AugMix with FedAvg and FedProx (Table III). Deviation from paper: it is also offered
# on the other loss-based methods (their losses only change the objective on the original batch, so the JS
# term adds to them unchanged); methods that change the batch or the data themselves (FedMix, FedBR, FedData,
# FLea, FedGen, CCVR) or the server's model (Fed-ZDAS, q-FFL) are left out.


def augmix_variant(
    base: type[Method], register_as: Callable[[type[AugMixJSMethod]], type[AugMixJSMethod]]
) -> tuple[type[AugMixJSMethod], type[AugMixJSConfig]]:
    """Fed-AugMix on the loss-based method ``base``: its method class and config class, registered.

    The method is ``class <Base>AugMix(AugMixJSMethod, <Base>)`` named ``<base>_augmix``; its config
    ``class <Base>AugMixConfig(AugMixJSConfig, <Base>Config)``: the base's options, then the AugMix ones, each
    checked as in its own class. Both are made as module-level classes of this module (the caller binds them
    to their names), so they pickle and read as if written out. ``register_as`` is the variant's
    ``register("method", "<base>_augmix", summary=..., paper=...)``, written at the call site so that
    ``fedaug list`` reads it from the source (:mod:`fedaug.cli.declared`).
    """
    prefix, base_config = base.__name__, base.config_cls
    config_name, method_name = f"{prefix}AugMixConfig", f"{prefix}AugMix"
    config: type[AugMixJSConfig] = dataclass(frozen=True)(
        type(
            config_name,
            (AugMixJSConfig, base_config),
            {
                "__doc__": f"Fed-AugMix on {prefix}: {base_config.__name__}'s options plus AugMixJSConfig's.",
                "__module__": __name__,
                "__qualname__": config_name,
            },
        )
    )
    method = type(
        method_name,
        (AugMixJSMethod, base),
        {
            "__doc__": f"{prefix} with AugMix views and the JS consistency loss on top of its own loss.",
            "__module__": __name__,
            "__qualname__": method_name,
            "name": f"{base.name}_augmix",
            "config_cls": config,
        },
    )
    return register_as(method), config


FedProxAugMix, FedProxAugMixConfig = augmix_variant(
    FedProx, register("method", "fedprox_augmix", summary="FedProx" + WITH_AUGMIX, paper=AUGMIX_PAPER)
)
FedDecorrAugMix, FedDecorrAugMixConfig = augmix_variant(
    FedDecorr, register("method", "feddecorr_augmix", summary="FedDecorr" + WITH_AUGMIX, paper=AUGMIX_PAPER)
)
FedLCAugMix, FedLCAugMixConfig = augmix_variant(
    FedLC, register("method", "fedlc_augmix", summary="FedLC" + WITH_AUGMIX, paper=AUGMIX_PAPER)
)
FedNTDAugMix, FedNTDAugMixConfig = augmix_variant(
    FedNTD, register("method", "fedntd_augmix", summary="FedNTD" + WITH_AUGMIX, paper=AUGMIX_PAPER)
)
FedRSAugMix, FedRSAugMixConfig = augmix_variant(
    FedRS, register("method", "fedrs_augmix", summary="FedRS" + WITH_AUGMIX, paper=AUGMIX_PAPER)
)
MOONAugMix, MOONAugMixConfig = augmix_variant(
    MOON, register("method", "moon_augmix", summary="MOON" + WITH_AUGMIX, paper=AUGMIX_PAPER)
)


LOSS_BASED_AUGMIX: tuple[type[AugMixJSMethod], ...] = (
    FedDecorrAugMix,
    FedLCAugMix,
    FedNTDAugMix,
    FedRSAugMix,
    MOONAugMix,
)
"""The variants on the loss-based methods beyond the paper's FedAvg and FedProx."""
