"""The attacker's post-processing of what it reconstructs or observes: the inputs' valid range and, for
FedMix's noised averages, the best per-feature affine estimate of a group member.

Both sides of the reconstruction attack are scored in the inputs' natural scale (:func:`fedaug.attacks.target.
to_pixels`) after the same clamp to the range the attacker knows the inputs lie in (:func:`value_range`):
pixels in [0, 1] for images; for other data (UCI-HAR's raw signal) the range of each channel over the
attacker's own data, since no range is defined. Clamping to a box that holds the true input never raises an
entry's error, so for images it only removes what is visibly impossible (a decoder's raw outputs and noised
averages leave [0, 1]).

FedMix without noise: the shared average is the best guess of each member (the members of a group are
exchangeable given their mean, so E[x_j | mean] = mean), and the attack scores it as it is. Under
``method.share_dp`` the average carries Gaussian noise and that argument fails: the attacker, who knows the
mechanism from the run's config, pushes its own inputs through it (:data:`FIT_PASSES` passes of fresh groups
and fresh noise from a stream of its own, never the targets) and fits, per feature d, the least-squares
affine map ``guess_d = b_d + k_d a_d`` from the noised average ``a`` to a member (:func:`fit_shrinkage`). With
signal variance s_d^2 per member, g members and noise std n_d per feature (in the natural scale), this is the
linear minimum-MSE estimate: k_d = (s_d^2 / g) / (s_d^2 / g + n_d^2), and b_d puts the estimate's mean at the
members' (clipping before averaging, which moves the average's mean, included). Its MSE per feature is
s_d^2 (1 - k_d / g) against the plain noised average's s_d^2 (1 - 1 / g) + n_d^2 (:func:`closed_form_mse`).
The attacker picks, on its own simulated data, the best of :data:`ESTIMATES`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from fedaug.attacks.target import Target, to_pixels
from fedaug.data.base import Dataset
from fedaug.runtime.seeding import torch_generator

FIT_PASSES = 10
"""Passes over the attacker's data (fresh groups, fresh noise) the shrinkage is fitted on."""

Bounds = tuple[Tensor, Tensor]
"""(low, high), broadcastable against a batch ``[B, *input_shape]`` in the natural scale."""


def value_range(dataset: Dataset, pix_att: Tensor) -> Bounds:
    """The range the attacker knows the inputs (natural scale) lie in: [0, 1] for images whose attacker
    images lie in it; otherwise each channel's (``dataset.norm_axis``) min and max over ``pix_att``."""
    if dataset.modality == "image" and float(pix_att.min()) >= 0.0 and float(pix_att.max()) <= 1.0:
        zero = torch.zeros((), dtype=pix_att.dtype, device=pix_att.device)
        return zero, zero + 1.0
    channel = dataset.norm_axis + 1 if dataset.mean is not None else 1
    axes = [d for d in range(pix_att.dim()) if d != channel]
    return pix_att.amin(dim=axes, keepdim=True), pix_att.amax(dim=axes, keepdim=True)


def clamp(x: Tensor, bounds: Bounds) -> Tensor:
    """``x`` clamped entry-wise to ``bounds`` (broadcast from the trailing axes)."""
    low, high = bounds
    return torch.maximum(torch.minimum(x, high), low)


@dataclass(frozen=True)
class Shrinkage:
    """Per-feature affine estimate of a member from its group's noised average: ``intercept + slope * a``.

    Attributes:
        slope: k per feature, shape of one input.
        intercept: b per feature, the same shape.
    """

    slope: Tensor
    intercept: Tensor

    def __call__(self, averages: Tensor) -> Tensor:
        """The estimate for each average ``[G, *input_shape]``."""
        return self.intercept + self.slope * averages


def fit_shrinkage(members: Tensor, averages: Tensor) -> Shrinkage:
    """Least squares per feature of every member ``[G, g, *shape]`` on its group's average ``[G, *shape]``
    (a feature whose average never varies gets slope 0: the members' mean).

    Every member of a group has the same regressor, so the sums over members are those over the groups'
    member means (no ``[G, g, D]`` copy in double precision).
    """
    x = members.flatten(2).double().mean(dim=1)  # [G, D]: each group's member mean
    a = averages.flatten(1).double()
    x_mean, a_mean = x.mean(dim=0), a.mean(dim=0)
    var = ((a - a_mean) ** 2).mean(dim=0)
    cov = ((a - a_mean) * (x - x_mean)).mean(dim=0)
    slope = torch.where(var > 0, cov / var.clamp_min(1e-300), torch.zeros_like(var))
    intercept = x_mean - slope * a_mean
    shape = averages.shape[1:]
    return Shrinkage(slope.view(shape).to(averages.dtype), intercept.view(shape).to(averages.dtype))


def closed_form_mse(signal_var: Tensor, noise_var: Tensor, group: int) -> tuple[float, float]:
    """(the shrinkage estimate's, the plain noised average's) MSE per entry of a member, from the members'
    variance per feature, the noise's variance per feature and the group size (no clipping)."""
    share = signal_var / group
    slope = share / (share + noise_var)
    shrunk = signal_var * (1 - slope / group)
    plain = signal_var * (1 - 1 / group) + noise_var
    return float(shrunk.mean()), float(plain.mean())


def member_mse(guess: Tensor, members: Tensor) -> float:
    """MSE of each group's guess ``[G, *shape]`` against its members ``[G, g, *shape]``."""
    return float(((members - guess[:, None]) ** 2).mean())


ESTIMATES: dict[str, Callable[[Tensor, Shrinkage, Bounds], Tensor]] = {
    "average": lambda a, shrink, bounds: a,
    "average, clamped": lambda a, shrink, bounds: clamp(a, bounds),
    "shrunk": lambda a, shrink, bounds: shrink(a),
    "shrunk, clamped": lambda a, shrink, bounds: clamp(shrink(a), bounds),
}
"""The attacker's estimates of a member from its group's noised average (natural scale)."""


@dataclass(frozen=True)
class AverageAttacker:
    """What the attacker fitted on its own data: the shrinkage, the range, its pick of :data:`ESTIMATES`."""

    shrinkage: Shrinkage
    bounds: Bounds
    choice: str

    def guesses(self, averages: Tensor) -> dict[str, Tensor]:
        """Every estimate of :data:`ESTIMATES` for the noised averages ``[G, *shape]``."""
        return {name: fn(averages, self.shrinkage, self.bounds) for name, fn in ESTIMATES.items()}


def fit_average_attacker(
    target: Target,
    attacker: tuple[Tensor, Tensor],
    group_fn: Callable[[Tensor, torch.Generator], Tensor],
    *,
    seed: int,
    key: str,
) -> AverageAttacker:
    """Pushes the attacker's inputs ``(x, y)`` (normalised) through ``target``'s mechanism in groups from
    ``group_fn(labels, generator)`` (:data:`FIT_PASSES` passes, noise from the attacker's own stream) and fits
    the shrinkage, the range and the pick on the result."""
    x_att, y_att = attacker
    pix_att = to_pixels(target.dataset, x_att)
    bounds = value_range(target.dataset, pix_att)
    members, averages = [], []
    for fit_pass in range(FIT_PASSES):
        idx = group_fn(y_att.cpu(), torch_generator(seed, "fedmix-fit-groups", key, fit_pass))
        if len(idx) == 0:
            continue
        idx = idx.to(x_att.device)
        noise = torch_generator(seed, "fedmix-fit-noise", key, fit_pass)
        averages.append(to_pixels(target.dataset, target.average(x_att[idx], noise=noise)))
        members.append(pix_att[idx])
    if not members:
        raise ValueError(f"{target.label}: too few attacker inputs for groups of {target.group_size}")
    fit_members, fit_averages = torch.cat(members), torch.cat(averages)
    fitted = AverageAttacker(fit_shrinkage(fit_members, fit_averages), bounds, "average")
    scores = {name: member_mse(guess, fit_members) for name, guess in fitted.guesses(fit_averages).items()}
    return dataclasses.replace(fitted, choice=min(scores, key=scores.__getitem__))
