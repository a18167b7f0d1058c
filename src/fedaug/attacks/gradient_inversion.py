"""Inverting Gradients on a multi-step client update (the attack Fed-AugMix defends against).

Source: "Inverting Gradients - How easy is it to break privacy in federated learning?" (Geiping, Bauermeister,
Dröge and Moeller, NeurIPS 2020, arXiv:2003.14053), official code JonasGeiping/invertinggradients
(``inversefed``: ``reconstruction_algorithms.py``, ``FedAvgReconstructor`` and ``loss_steps``).

The attacker holds the global weights ``w``, the client's update ``dw = w_client - w`` and the labels. It
optimises dummy images ``x`` so that the update of a *simulated* client training on ``x`` points the same way
as ``dw``::

    cost(x) = 1 - <dw(x), dw> / (|dw(x)| |dw|)  (one cosine over all parameters)  +  tv * TV(x)

``dw(x)`` unrolls the client's local SGD steps with functional parameters (``torch.func.functional_call``)
and differentiates through them (second-order gradients), as in Geiping et al.'s multi-step FedAvg attack.
The simulated objective is the threat model: plain cross-entropy, or Fed-AugMix's CE + lambda * JS over the
dummy images and two AugMix views of them (with the loss-scaling rule), the views drawn once from the
attacker's own generator (it cannot know the client's draws). Optimiser: Adam on the *signed* gradient, lr
0.1 divided by 10 at 3/8, 5/8 and 7/8 of the iterations, images clamped to the valid (normalised) pixel box
after every step, initialisation N(0, 1), several restarts scored by their final cost. Batch-norm layers run
in the client's mode (training mode: batch statistics), with the running statistics left untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from fedaug.augment import AugMix, AugMixDraw
from fedaug.errors import ConfigError
from fedaug.methods.fedaugmix import AugMixJSConfig, scheduled_lambda
from fedaug.methods.parts.losses import jensen_shannon

logger = logging.getLogger(__name__)

Params = dict[str, Tensor]
UpdateFn = Callable[[Tensor], Params]


@dataclass(frozen=True)
class InversionConfig:
    """The attacker's optimisation (defaults: the Fed-AugMix paper and inversefed's FedAvg attack).

    Attributes:
        iterations: optimisation steps (paper: 2500).
        lr: Adam step size on the signed gradient (paper: 0.1).
        tv_weight: weight of the total-variation prior. The paper's value is lost in extraction; 1e-4 is
            inversefed's CIFAR-10 setting (Geiping et al.).
        restarts: independent random initialisations; the one with the lowest final cost is kept.
    """

    iterations: int = 2500
    lr: float = 0.1
    tv_weight: float = 1e-4
    restarts: int = 1

    def __post_init__(self) -> None:
        if self.iterations < 1 or self.restarts < 1:
            raise ConfigError(
                f"iterations and restarts must be >= 1, got {self.iterations} and {self.restarts}"
            )
        if self.lr <= 0 or self.tv_weight < 0:
            raise ConfigError(f"attack lr must be > 0 and tv_weight >= 0, got {self.lr} and {self.tv_weight}")


@dataclass(frozen=True)
class ClientSimulation:
    """What the attacker assumes about the client's local training.

    Attributes:
        steps: local SGD steps (epochs x batches; paper: 5 epochs of one batch of 4).
        lr: the client's SGD learning rate.
        augmix: None for plain cross-entropy; else Fed-AugMix's options (the attacker models AugMix + JS).
        mean: per-channel input normalisation mean (None: inputs in [0, 1]).
        std: per-channel input normalisation std.
    """

    steps: int = 5
    lr: float = 1e-4
    augmix: AugMixJSConfig | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None


def cosine_distance(update: Params, target: Params) -> Tensor:
    """``1 - cos`` between two updates, all parameters concatenated (one cosine over all layers)."""
    dot = torch.stack([(update[k] * target[k]).sum() for k in target]).sum()
    norm_u = torch.stack([update[k].pow(2).sum() for k in target]).sum().sqrt()
    norm_t = torch.stack([target[k].pow(2).sum() for k in target]).sum().sqrt()
    return 1 - dot / (norm_u * norm_t).clamp_min(1e-12)


def total_variation(x: Tensor) -> Tensor:
    """Anisotropic total variation: mean |horizontal| + mean |vertical| neighbour differences."""
    dx = (x[:, :, :, :-1] - x[:, :, :, 1:]).abs().mean()
    dy = (x[:, :, :-1, :] - x[:, :, 1:, :]).abs().mean()
    return dx + dy


def client_objective(
    model: nn.Module,
    params: Params,
    buffers: Params,
    x: Tensor,
    y: Tensor,
    augmix: tuple[AugMix, AugMixJSConfig, AugMixDraw] | None,
) -> Tensor:
    """The client's loss on ``x`` under ``params``: CE, or CE + lambda * JS over two AugMix views of ``x``.

    Mirrors the victim's forward passes (the originals, then the views) so batch norm sees the same batches.
    """
    logits = functional_call(model, (params, buffers), (x,))
    ce = F.cross_entropy(logits, y)
    if augmix is None:
        return ce
    transform, config, draw = augmix
    views = transform.apply(x, draw)
    logits_views = functional_call(model, (params, buffers), (views.flatten(0, 1),))
    js = jensen_shannon(logits, *logits_views.chunk(2))
    return ce + scheduled_lambda(ce.detach(), js.detach(), config) * js


def simulated_update(
    model: nn.Module,
    start: Params,
    buffers: Params,
    y: Tensor,
    client: ClientSimulation,
    draws: list[AugMixDraw] | None,
) -> UpdateFn:
    """``x -> w_after - w_before`` of the client's unrolled local SGD on ``(x, y)``, differentiable in x."""
    parts = None
    if client.augmix is not None:
        cfg = client.augmix
        transform = AugMix(
            severity=cfg.severity, width=cfg.width, depth=cfg.depth, mean=client.mean, std=client.std
        )
        parts = (transform, cfg)

    def update(x: Tensor) -> Params:
        params = {k: v.detach().clone().requires_grad_(True) for k, v in start.items()}
        for step in range(client.steps):
            fixed = None if parts is None or draws is None else (*parts, draws[step])
            state = {k: v.clone() for k, v in buffers.items()}  # BN running stats must not drift
            loss = client_objective(model, params, state, x, y, fixed)
            grads = torch.autograd.grad(loss, list(params.values()), create_graph=True)
            params = {k: p - client.lr * g for (k, p), g in zip(params.items(), grads, strict=True)}
        return {k: params[k] - start[k] for k in start}

    return update


def reconstruct(
    update_fn: UpdateFn,
    target: Params,
    shape: tuple[int, ...],
    bounds: tuple[Tensor, Tensor],
    config: InversionConfig,
    generator: torch.Generator,
) -> tuple[Tensor, float]:
    """Dummy images whose simulated update matches ``target``; returns the best restart and its cost.

    Args:
        update_fn: the simulated client update of images ``x``.
        target: the observed update.
        shape: ``[B, C, H, W]`` of the images to recover.
        bounds: per-channel lower and upper pixel values (normalised space), broadcastable to ``shape``.
        config: optimisation settings.
        generator: source of the initialisations (a CPU generator: they are drawn on the CPU and moved to
            the device of ``target``, where the dummy images are optimised).
    """
    device = next(iter(target.values())).device
    best, best_cost = None, float("inf")
    milestones = [int(config.iterations * f) for f in (3 / 8, 5 / 8, 7 / 8)]
    for restart in range(config.restarts):
        x = torch.randn(shape, generator=generator).to(device).requires_grad_(True)
        optimizer = torch.optim.Adam([x], lr=config.lr)
        schedule = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=milestones, gamma=0.1)
        for _ in range(config.iterations):
            cost = cosine_distance(update_fn(x), target) + config.tv_weight * total_variation(x)
            (grad,) = torch.autograd.grad(cost, [x])
            x.grad = grad.sign()
            optimizer.step()
            schedule.step()
            with torch.no_grad():
                x.copy_(torch.maximum(torch.minimum(x, bounds[1]), bounds[0]))
        final = float(
            (cosine_distance(update_fn(x), target) + config.tv_weight * total_variation(x)).detach()
        )
        logger.info("restart %d: final cost %.4f", restart, final)
        if final < best_cost:
            best, best_cost = x.detach().clone(), final
    assert best is not None
    return best, best_cost
