"""CCVR's numerics: per-class feature statistics, their exact pooling, virtual features, classifier fitting.

Pooling (CCVR paper, Sec. 4): with client k holding N_ck features of class c with mean mu_ck and unbiased
covariance S_ck, the class's global statistics are those of the pooled samples,

    N_c = sum_k N_ck,   mu_c = sum_k N_ck mu_ck / N_c,
    S_c = sum_k (N_ck - 1) / (N_c - 1) S_ck + sum_k N_ck / (N_c - 1) mu_ck mu_ck^T
          - N_c / (N_c - 1) mu_c mu_c^T.

A class seen once has a zero covariance (its virtual features all equal its mean).

Device: the pooling, the eigen-decompositions and the Gaussian draws run on the CPU in float64 from the CPU
generator whatever device the run computes on (the same virtual features on every device, and no
per-element host-device syncs); :func:`sample_virtual` hands the features to the run's device and
:func:`fit_classifier` fits on the classifier's device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from fedaug.methods.parts.payloads import read_extra
from fedaug.privacy.gaussian import clip_rows, gaussian_noise
from fedaug.runtime.device import host_to_device
from fedaug.training.loop import batch_indices
from fedaug.types import Extra


def class_statistics(features: Tensor, labels: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per-class count, mean and unbiased covariance of ``features [n, d]`` (computed in float64).

    Returns:
        ``(classes [m], counts [m], means [m, d], covs [m, d, d])`` for the m classes present.
    """
    feats = features.to(torch.float64)
    classes = torch.unique(labels)
    counts = torch.stack([(labels == c).sum() for c in classes]) if len(classes) else labels.new_empty(0)
    means, covs = [], []
    for c in classes:
        rows = feats[labels == c]
        mean = rows.mean(dim=0)
        centred = rows - mean
        scatter = centred.T @ centred
        covs.append(scatter / (rows.shape[0] - 1) if rows.shape[0] > 1 else torch.zeros_like(scatter))
        means.append(mean)
    dim = feats.shape[1]
    if not means:
        return classes, counts, feats.new_empty(0, dim), feats.new_empty(0, dim, dim)
    return classes, counts, torch.stack(means), torch.stack(covs)


def private_class_statistics(
    features: Tensor, labels: Tensor, *, clip: float, noise_multiplier: float, generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`class_statistics` under ``method.share_dp``: the Gaussian mechanism on each class's sufficient
    statistics, the sum s_c and the second moment Q_c = sum x x^T of its features clipped to L2 norm
    ``clip``, turned into the mean s_c / n_c and covariance (Q_c - n_c mu_c mu_c^T) / (n_c - 1) that
    :func:`pool_statistics` pools back into exactly the noisy sums (post-processing).

    Sensitivity (replace-one, the labels fixed): replacing one feature x by x' moves s_c by at most 2 clip
    and Q_c by ||x' x'^T - x x^T||_F = sqrt(|x'|^4 + |x|^4 - 2 (x . x')^2) <= sqrt(2) clip^2 (the upper
    triangle, diagonal included, by no more). Noise of std ``noise_multiplier * clip * sqrt(2)`` on every
    entry of s_c and ``noise_multiplier * clip^2`` on every upper-triangle entry of Q_c (mirrored below)
    makes the pair, in units of its noise, move by at most sqrt(2 + 2) = 2 / noise_multiplier: one Gaussian
    release of the sample with noise multiplier ``noise_multiplier / 2`` against its sensitivity, the
    event :func:`fedaug.privacy.gaussian.gaussian_epsilon` accounts (as FLea's rows).

    # Deviation from paper: CCVR shares the exact statistics of unclipped features; here every feature is
    # clipped and s_c, Q_c are noised, so a covariance may be indefinite (sample_virtual clips its negative
    # eigenvalues) and a small class's mean is noisy. The classes and their counts n_c leave in the clear
    # (as FLea's and FedMix's labels do): the guarantee is for the features given the labels.

    Returns:
        ``(classes [m], counts [m], means [m, d], covs [m, d, d])`` in float64, as :func:`class_statistics`.
    """
    feats = clip_rows(features.to(torch.float64), clip)
    classes = torch.unique(labels)
    dim = feats.shape[1]
    counts, means, covs = [], [], []
    for c in classes:
        rows = feats[labels == c]
        n = rows.shape[0]
        total = rows.sum(dim=0) + gaussian_noise((dim,), noise_multiplier * clip * 2**0.5, generator, rows)
        upper = torch.triu(gaussian_noise((dim, dim), noise_multiplier * clip**2, generator, rows))
        second = rows.T @ rows + upper + torch.triu(upper, diagonal=1).T
        mean = total / n
        cov = (second - n * torch.outer(mean, mean)) / (n - 1) if n > 1 else torch.zeros(dim, dim).to(rows)
        counts.append(torch.tensor(n))
        means.append(mean)
        covs.append(cov)
    if not means:
        return classes, labels.new_empty(0), feats.new_empty(0, dim), feats.new_empty(0, dim, dim)
    return classes, torch.stack(counts), torch.stack(means), torch.stack(covs)


@dataclass(frozen=True)
class ClassStatistics:
    """One client's per-class feature statistics, what a ``gaussian`` CCVR client uploads
    (``ClientShare.extra``: ``classes``, ``counts``, ``means``, ``covs``).

    Attributes:
        classes: the m classes the client holds, ``[m]``.
        counts: their sample counts, ``[m]``.
        means: their feature means, ``[m, d]``.
        covs: their unbiased feature covariances, ``[m, d, d]``.
    """

    classes: Tensor
    counts: Tensor
    means: Tensor
    covs: Tensor

    def to_extra(self) -> Extra:
        return {"classes": self.classes, "counts": self.counts, "means": self.means, "covs": self.covs}

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any]) -> ClassStatistics:
        keys = ("classes", "counts", "means", "covs")
        return cls(*(read_extra(extra, key, "ccvr (a client's class statistics)") for key in keys))


def pool_statistics(shares: Sequence[ClassStatistics], num_classes: int) -> tuple[Tensor, Tensor, Tensor]:
    """Exact global per-class statistics from the clients' (module docstring), in float64.

    Args:
        shares: one client's statistics each (:func:`class_statistics`' values).
        num_classes: C.

    Returns:
        ``(counts [C], means [C, d], covs [C, d, d])`` on the CPU; classes nobody holds have count 0.
    """
    shares = [ClassStatistics(s.classes.cpu(), s.counts.cpu(), s.means.cpu(), s.covs.cpu()) for s in shares]
    dim = max((s.means.shape[1] for s in shares if len(s.classes)), default=0)
    counts = torch.zeros(num_classes, dtype=torch.float64)
    sums = torch.zeros(num_classes, dim, dtype=torch.float64)
    second = torch.zeros(num_classes, dim, dim, dtype=torch.float64)  # sum of x x^T over samples
    for share in shares:
        for c, n, mean, cov in zip(share.classes, share.counts, share.means, share.covs, strict=True):
            n, mean, cov = float(n), mean.to(torch.float64), cov.to(torch.float64)
            counts[c] += n
            sums[c] += n * mean
            second[c] += (n - 1) * cov + n * torch.outer(mean, mean)
    safe = counts.clamp_min(1)
    means = sums / safe[:, None]
    scatter = second - safe[:, None, None] * means[:, :, None] * means[:, None, :]
    covs = scatter / (counts - 1).clamp_min(1)[:, None, None]
    covs[counts <= 1] = 0.0
    return counts, means, covs


def sample_virtual(
    counts: Tensor,
    means: Tensor,
    covs: Tensor,
    per_class: int,
    generator: torch.Generator,
    device: torch.device | str = "cpu",
) -> tuple[Tensor, Tensor]:
    """``per_class`` draws from N(mu_c, S_c) for every class with data, as float32 features and labels on
    ``device``.

    The square root of S_c comes from its eigen-decomposition (negative round-off eigenvalues clipped to 0),
    so singular covariances (fewer samples than dimensions, the usual case) are sampled exactly. Computed on
    the CPU in float64 from the CPU ``generator`` and then moved, so every device gets the same features.
    """
    counts, means, covs = counts.cpu(), means.cpu(), covs.cpu()
    features, labels = [], []
    for c in torch.nonzero(counts > 0).flatten().tolist():
        eigenvalues, eigenvectors = torch.linalg.eigh(covs[c])
        root = eigenvectors * eigenvalues.clamp_min(0).sqrt()
        noise = torch.randn(per_class, means.shape[1], generator=generator, dtype=torch.float64)
        features.append((means[c] + noise @ root.T).float())
        labels.append(torch.full((per_class,), c, dtype=torch.long))
    if not features:
        return torch.empty(0, device=device), torch.empty(0, dtype=torch.long, device=device)
    return torch.cat(features).to(device), torch.cat(labels).to(device)


def fit_classifier(
    weight: Tensor,
    bias: Tensor,
    features: Tensor,
    labels: Tensor,
    *,
    epochs: int,
    lr: float,
    momentum: float,
    batch_size: int,
    generator: torch.Generator,
) -> tuple[Tensor, Tensor, float]:
    """Fine-tunes a copy of a linear classifier with SGD and cross-entropy on ``features``.

    The fit runs on the classifier's device (features and labels are moved there); the batch order is drawn
    from the CPU ``generator``, the same on every device.

    Returns:
        The new weight and bias (detached) and the mean loss of the last epoch (nan without features).
    """
    w = weight.detach().clone().requires_grad_(True)
    b = bias.detach().clone().requires_grad_(True)
    if labels.numel() == 0:
        return w.detach(), b.detach(), float("nan")
    optimizer = torch.optim.SGD([w, b], lr=lr, momentum=momentum)
    features = features.to(device=w.device, dtype=w.dtype)
    labels = labels.to(w.device)
    last = torch.zeros((), device=w.device)
    for _ in range(epochs):
        last, steps = torch.zeros((), device=w.device), 0
        order = host_to_device(torch.randperm(labels.shape[0], generator=generator), w.device)
        for idx in batch_indices(order, batch_size):
            loss: Tensor = F.cross_entropy(features[idx] @ w.T + b, labels[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            last, steps = last + loss.detach(), steps + 1
        last = last / max(steps, 1)
    return w.detach(), b.detach(), float(last)
