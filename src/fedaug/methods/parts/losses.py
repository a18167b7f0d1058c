"""Loss terms shared by the methods, each defined once (plus the two model helpers they need).

Every function works on plain tensors so it can be checked by hand on tiny inputs; the method modules close
over them in their ``loss_fn``. The one-line formulas:

* :func:`soft_cross_entropy`: ``-mean_i sum_c p_ic log softmax(z_i)_c`` (FLea, FedMix, FedBR).
* :func:`proximal_term`: ``sum ||w - w_global||^2`` over the trainable parameters (FedProx).
* :func:`decorrelation_loss`: mean squared off-diagonal of the standardised features' Gram matrix, / N
  (FedDecorr, the authors' formula).
* :func:`calibration_shift`: ``tau * n_c^(-1/4)``, subtracted from the logits (FedLC).
* :func:`restriction_scale`: 1 for the client's classes, ``alpha`` for the missing ones (FedRS).
* :func:`kl_divergence`: ``KL(softmax(p) || softmax(q))``, batch mean (FLea's L_dis; FedNTD's KL).
* :func:`not_true_distillation`: ``T^2 KL(softmax(g_nt / T) || softmax(l_nt / T))`` (FedNTD).
* :func:`model_contrastive_loss`: MOON's ``-log(e^{s(z, z_g)/t} / (e^{s(z, z_g)/t} + e^{s(z, z_p)/t}))``
  with s the cosine similarity, z_g the global and z_p the previous local model's features.
* :func:`jensen_shannon`: ``mean_i KL(p_i || M)``, ``M = clamp(mean_i p_i, 1e-7, 1)`` (Fed-AugMix).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedaug.api import ClientContext
from fedaug.errors import IncompatibleModelError
from fedaug.models.base import SplitModel
from fedaug.training.loop import load_weights
from fedaug.training.row_mask import batch_mean, batch_rows, batch_var, mean_cross_entropy, real_rows


def soft_cross_entropy(logits: Tensor, target_probs: Tensor) -> Tensor:
    """Cross-entropy against soft labels, averaged over the batch.

    Args:
        logits: ``[B, C]`` unnormalised scores.
        target_probs: ``[B, C]`` target distributions (rows sum to 1; one-hot rows give plain CE).
    """
    return batch_mean(-(target_probs * F.log_softmax(logits, dim=1)).sum(dim=1))


def proximal_term(model: nn.Module, anchors: Mapping[str, Tensor]) -> Tensor:
    """Squared Euclidean distance ``sum_k ||w_k - a_k||^2`` between the named parameters and their anchors.

    Args:
        model: the model being trained.
        anchors: detached reference values (FedProx: the global weights) keyed by parameter name; parameters
            without an anchor (frozen ones) are skipped.
    """
    terms = [(p - anchors[name]).pow(2).sum() for name, p in model.named_parameters() if name in anchors]
    return torch.stack(terms).sum()


def decorrelation_loss(features: Tensor, eps: float = 1e-8) -> Tensor:
    """FedDecorr's regulariser on a batch of features ``[N, d]`` (the authors' formula).

    Each dimension is standardised over the batch (mean 0, unbiased variance + ``eps``), the Gram matrix
    ``Z^T Z`` (= (N - 1) x the correlation matrix) is formed, and the mean of its squared off-diagonal entries
    is divided by N. A batch of one sample has no correlation and gives 0.

    Raises:
        ValueError: for features of fewer than 2 dimensions (no off-diagonal entries).
    """
    num, dim = features.shape
    if dim < 2:
        raise ValueError(f"decorrelation needs features of >= 2 dimensions, got {dim}")
    if num == 1:
        return features.new_zeros(())
    # over a padded batch's real rows (fedaug.training.row_mask): their mean and variance, padded rows
    # zeroed, / n
    num_real = batch_rows(features)
    centred = features - batch_mean(features, 0, keepdim=True)
    standardised = real_rows(centred / torch.sqrt(eps + batch_var(centred, 0, keepdim=True)))
    if num < dim:
        # The same value without the d x d Gram matrix (HARNet's d = 8448 made it ~1 s per step): the squared
        # entries of Z^T Z sum to those of the N x N matrix Z Z^T, and its diagonal holds the column norms.
        total = (standardised @ standardised.T).pow(2).sum()
        diagonal = standardised.pow(2).sum(dim=0).pow(2).sum()
        return (total - diagonal) / (dim * (dim - 1)) / num_real
    gram = standardised.T @ standardised
    off_diagonal = gram.flatten()[:-1].view(dim - 1, dim + 1)[:, 1:]
    return off_diagonal.pow(2).mean() / num_real


def calibration_shift(class_counts: Tensor, tau: float, min_count: float) -> Tensor:
    """FedLC's per-class logit shift ``tau * max(n_c, min_count)^(-1/4)``, shape ``[C]``.

    Args:
        class_counts: the client's number of samples of every class.
        tau: calibration strength (0 gives a zero shift, i.e. plain CE).
        min_count: the count used for classes the client lacks (their ``n_c^(-1/4)`` is infinite).
    """
    return tau * class_counts.to(torch.float32).clamp_min(min_count).pow(-0.25)


def restriction_scale(class_counts: Tensor, alpha: float) -> Tensor:
    """FedRS's per-class logit factor, shape ``[C]``: 1 where the client has samples, ``alpha`` elsewhere."""
    ones = torch.ones(class_counts.shape, dtype=torch.float32, device=class_counts.device)
    return torch.where(class_counts > 0, ones, ones * alpha)


def not_true_logits(logits: Tensor, labels: Tensor) -> Tensor:
    """``logits [B, C]`` with each row's true-class column removed, shape ``[B, C - 1]``.

    Gathered by index (column j of the result is class j, or j + 1 from the true class on), not by a boolean
    mask, so that it has a fixed shape under ``torch.func.vmap`` (batched clients).
    """
    columns = torch.arange(logits.shape[-1] - 1, device=logits.device)
    index = columns + (columns >= labels.unsqueeze(-1)).long()
    return torch.gather(logits, -1, index)


def one_hot(labels: Tensor, num_classes: int) -> Tensor:
    """``F.one_hot(labels, num_classes)`` (int64) without its data-dependent range check, so that it works
    under ``torch.func.vmap`` (batched clients); labels must lie in ``[0, num_classes)``."""
    classes = torch.arange(num_classes, device=labels.device)
    return (labels.unsqueeze(-1) == classes).long()


def not_true_distillation(
    local_logits: Tensor, global_logits: Tensor, labels: Tensor, temperature: float
) -> Tensor:
    """FedNTD's ``T^2 KL(softmax(g_nt / T) || softmax(l_nt / T))`` over not-true classes, batch mean.

    Args:
        local_logits: ``[B, C]`` logits of the model being trained.
        global_logits: ``[B, C]`` logits of the frozen global model (treated as a constant target).
        labels: ``[B]`` true classes, whose columns are dropped from both.
        temperature: softmax temperature T.
    """
    local_nt = not_true_logits(local_logits, labels) / temperature
    global_nt = not_true_logits(global_logits.detach(), labels) / temperature
    return kl_divergence(global_nt, local_nt) * temperature**2


def model_contrastive_loss(z: Tensor, z_glob: Tensor, z_prev: Tensor, temperature: float) -> Tensor:
    """MOON's model-contrastive loss, batch mean (cosine similarity, the global model as the positive).

    Args:
        z: ``[B, d]`` representations of the model being trained.
        z_glob: ``[B, d]`` representations of the frozen global model (positive pair).
        z_prev: ``[B, d]`` representations of this client's previous local model (negative pair).
        temperature: divides the similarities.
    """
    positive = F.cosine_similarity(z, z_glob.detach(), dim=-1)
    negative = F.cosine_similarity(z, z_prev.detach(), dim=-1)
    logits = torch.stack([positive, negative], dim=1) / temperature
    return mean_cross_entropy(logits, torch.zeros(z.shape[0], dtype=torch.long, device=z.device))


def split_model(model: nn.Module) -> SplitModel:
    """``model`` as a :class:`SplitModel` (penultimate features and a linear ``classifier``).

    Raises:
        IncompatibleModelError: if ``model`` is not a :class:`SplitModel` (it has no penultimate layer).
    """
    if not isinstance(model, SplitModel):
        raise IncompatibleModelError(
            f"{type(model).__name__} is not a SplitModel (it has no penultimate layer)"
        )
    return model


def features_and_logits(model: nn.Module, x: Tensor) -> tuple[Tensor, Tensor]:
    """One forward pass returning the penultimate features and the logits computed from them.

    Raises:
        IncompatibleModelError: if ``model`` is not a :class:`SplitModel` (it has no penultimate layer).
    """
    model = split_model(model)
    features = model.penultimate(x)
    logits: Tensor = model.classifier(features)
    return features, logits


def frozen_model(ctx: ClientContext, key: str, state: Mapping[str, Tensor]) -> SplitModel:
    """The workspace model ``key`` holding ``state``, in eval mode (a frozen teacher; call it under no_grad).

    The workspace model is built once per run and reused by every client, so no model is copied per client.

    Raises:
        RuntimeError: if the engine gave the client no workspace.
    """
    if ctx.workspace is None:
        raise RuntimeError(f"this method needs a workspace model {key!r}, but the client context has none")
    model = ctx.workspace(key)
    load_weights(model, state)
    model.eval()
    return model


def kl_divergence(p_logits: Tensor, q_logits: Tensor) -> Tensor:
    """``KL(softmax(p) || softmax(q))`` summed over classes and averaged over the batch (FLea's L_dis).

    Gradients flow into whichever argument requires them (FLea's paper form puts the local logits first).
    """
    log_p = F.log_softmax(p_logits, dim=1)
    log_q = F.log_softmax(q_logits, dim=1)
    return batch_mean((log_p.exp() * (log_p - log_q)).sum(dim=1))


def jensen_shannon(*logits: Tensor) -> Tensor:
    """Jensen-Shannon divergence of the softmax distributions of ``logits``, averaged over the batch.

    ``JS = mean_i KL(p_i || M)`` with ``p_i = softmax(logits_i)`` and the mixture ``M = mean_i p_i``
    clamped to [1e-7, 1] before its log (the AugMix reference code; Fed-AugMix Eq. 6). Identical inputs
    give 0 (up to float rounding of the mean).

    Each ``KL(p_i || M)`` is computed from ``log_softmax`` (``exp(log p) * (log p - log M)``), not from the
    probabilities as the AugMix reference does (``F.kl_div(log M, p)``): a confident model's softmax
    underflows to exactly 0 for logit gaps above ~104 in float32, and the gradient of ``p log p`` at
    ``p = 0`` is ``-inf * 0 = NaN`` (a 100-round Fed-AugMix run on MNIST diverged that way at round 68).
    The value is the same up to float rounding.

    Args:
        logits: two or more ``[B, C]`` tensors (Fed-AugMix: the original and two AugMix views).
    """
    if len(logits) < 2:
        raise ValueError(f"jensen_shannon needs at least two distributions, got {len(logits)}")
    log_probs = [F.log_softmax(z, dim=1) for z in logits]
    log_mixture = torch.clamp(torch.stack([lp.exp() for lp in log_probs]).mean(dim=0), 1e-7, 1).log()
    return torch.stack(
        [F.kl_div(log_mixture, lp, reduction="batchmean", log_target=True) for lp in log_probs]
    ).mean()
