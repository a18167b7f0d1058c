"""Distance correlation between inputs and shared activations: as a loss (FLea's L_dec) and as a metric.

Székely, Rizzo & Bakirov, "Measuring and testing dependence by correlation of distances", Ann. Statist.
2007; bias-corrected version: Székely & Rizzo, "The distance correlation t-test of independence in high
dimension", J. Multivariate Anal. 2013. Used as a privacy loss by Vepakomma et al. ("NoPeek", 2020) and FLea.

Three forms (``form`` argument of :func:`decorrelation_loss`):

* ``"dcor_squared"`` (default; FLea KDD Eq. 5/8): nu^2(X, F) / sqrt(nu^2(X, X) nu^2(F, F)), the squared
  distance correlation from double-centred Euclidean distance matrices (V-statistic).
* ``"dcor"``: its square root, the official FLea code's choice (with the code's small epsilons).
* ``"trace"`` (ICLR draft Eq. 5): Tr(X^T F F^T X) / (sqrt(Tr((X^T X)^2)) sqrt(Tr((F^T F)^2))). With centred
  columns this is the RV coefficient: it only sees linear dependence.

As a loss, squared distances are clamped at ``1e-7`` before the square root (the gradient of sqrt at the zero
diagonal is NaN otherwise). As a metric (:func:`distance_correlation`, :func:`u_distance_correlation_sqr`),
distances are exact and computed in float64; they match the ``dcor`` package. Note the plain V-statistic is
close to 1 for independent high-dimensional data at small n; report the bias-corrected value beside it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedaug.errors import ConfigError
from fedaug.training.row_mask import batch_mean, real_rows

DECOR_FORMS = ("dcor_squared", "dcor", "trace")
LOSS_EPS = 1e-7


def pairwise_distances(x: Tensor, *, clamp: float = 0.0) -> Tensor:
    """Euclidean distance matrix of the rows of ``x [n, d]``; squared distances clamped at ``clamp``."""
    sq = (x * x).sum(dim=1)
    d2 = sq[:, None] - 2.0 * (x @ x.T) + sq[None, :]
    return torch.sqrt(d2.clamp_min(clamp))


def _double_centre(a: Tensor) -> Tensor:
    return a - batch_mean(a, 0, keepdim=True) - batch_mean(a, 1, keepdim=True) + batch_mean(a)


def _dcov2_terms(x: Tensor, f: Tensor, clamp: float) -> tuple[Tensor, Tensor, Tensor]:
    a = _double_centre(pairwise_distances(x.flatten(1), clamp=clamp))
    b = _double_centre(pairwise_distances(f.flatten(1), clamp=clamp))
    return batch_mean(a * b), batch_mean(a * a), batch_mean(b * b)


def distance_correlation_sqr(x: Tensor, f: Tensor, *, clamp: float = 0.0) -> Tensor:
    """Squared distance correlation (V-statistic) of the flattened rows of ``x`` and ``f``.

    With ``clamp > 0`` (the loss) the denominator is ``sqrt(nu^2(X,X) nu^2(F,F) + clamp^2)``: the same value
    whenever the features vary (clamp^2 = 1e-14 is far below float32 resolution of typical products), and a
    finite gradient when a batch's features are constant (nu^2(F,F) = 0: a batch of one sample, or features
    collapsed by the decorrelation pressure), where sqrt'(0) = inf used to turn the whole update into NaN.
    """
    xy, xx, yy = _dcov2_terms(x, f, clamp)
    if clamp > 0:
        return xy / torch.sqrt(xx * yy + clamp * clamp)
    denom = torch.sqrt(xx * yy)
    return torch.where(denom > 0, xy / denom.clamp_min(torch.finfo(denom.dtype).tiny), torch.zeros_like(xy))


@torch.no_grad()
def distance_correlation(x: Tensor, f: Tensor) -> float:
    """Distance correlation (not squared; = ``dcor.distance_correlation``), exact, in float64."""
    return float(distance_correlation_tensor(x, f))


@torch.no_grad()
def distance_correlation_tensor(x: Tensor, f: Tensor) -> Tensor:
    """:func:`distance_correlation` as a float64 0-dim tensor where ``x`` lives (no read to the host)."""
    return distance_correlation_sqr(x.flatten(1).double(), f.flatten(1).double()).clamp_min(0).sqrt()


def _u_centre(a: Tensor) -> Tensor:
    n = a.shape[0]
    u = (
        a
        - a.sum(dim=0, keepdim=True) / (n - 2)
        - a.sum(dim=1, keepdim=True) / (n - 2)
        + a.sum() / ((n - 1) * (n - 2))
    )
    return u.fill_diagonal_(0.0)


@torch.no_grad()
def u_distance_correlation_sqr(x: Tensor, f: Tensor) -> float:
    """Bias-corrected squared distance correlation (= ``dcor.u_distance_correlation_sqr``); needs n > 3.

    Unlike the V-statistic it is about 0 for independent data even in high dimension at small n (it can be
    slightly negative). Returns NaN for n <= 3.
    """
    return float(u_distance_correlation_sqr_tensor(x, f))


@torch.no_grad()
def u_distance_correlation_sqr_tensor(x: Tensor, f: Tensor) -> Tensor:
    """:func:`u_distance_correlation_sqr` as a float64 0-dim tensor where ``x`` lives (no host read)."""
    n = x.shape[0]
    if n <= 3:
        return torch.full((), float("nan"), dtype=torch.float64, device=x.device)
    a = _u_centre(pairwise_distances(x.flatten(1).double()))
    b = _u_centre(pairwise_distances(f.flatten(1).double()))
    xy, xx, yy = (a * b).sum(), (a * a).sum(), (b * b).sum()
    denom = torch.sqrt(xx * yy)
    return torch.where(denom > 0, xy / denom.clamp_min(torch.finfo(denom.dtype).tiny), torch.zeros_like(xy))


def trace_correlation(x: Tensor, f: Tensor) -> Tensor:
    """ICLR draft's Tr(X^T F F^T X) / (||X^T X||_F ||F^T F||_F) on column-centred X, F (the RV coefficient).

    Computed through the n x n Gram matrices (Tr(X^T F F^T X) = <X X^T, F F^T>), cheap when n << d.
    """
    xc = real_rows(x.flatten(1) - batch_mean(x.flatten(1), 0, keepdim=True))
    fc = real_rows(f.flatten(1) - batch_mean(f.flatten(1), 0, keepdim=True))
    kx, kf = xc @ xc.T, fc @ fc.T
    # The epsilon sits inside the square root: a Frobenius norm's gradient at 0 is NaN (constant features).
    denom = torch.sqrt((kx * kx).sum() * (kf * kf).sum() + LOSS_EPS * LOSS_EPS)
    return (kx * kf).sum() / denom


def official_dcor(x: Tensor, f: Tensor) -> Tensor:
    """The official FLea code's unsquared dCor with its epsilons (docs/methods/flea.md, the authors' code)."""
    xy, xx, yy = _dcov2_terms(x, f, LOSS_EPS)
    dcov = torch.sqrt(xy + LOSS_EPS)
    dvar_x, dvar_f = torch.sqrt(xx + LOSS_EPS), torch.sqrt(yy + LOSS_EPS)
    return dcov / (torch.sqrt(dvar_x + LOSS_EPS) * torch.sqrt(dvar_f + LOSS_EPS))


def decorrelation_loss(x: Tensor, f: Tensor, *, form: str = "dcor_squared") -> Tensor:
    """FLea's L_dec between a batch of inputs ``x`` and their activations ``f`` (differentiable in f)."""
    if form == "dcor_squared":
        return distance_correlation_sqr(x, f, clamp=LOSS_EPS)
    if form == "dcor":
        return official_dcor(x, f)
    if form == "trace":
        return trace_correlation(x, f)
    raise ConfigError(f"unknown decorrelation form {form!r}; valid choices: {', '.join(DECOR_FORMS)}")
