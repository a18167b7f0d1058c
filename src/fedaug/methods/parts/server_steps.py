"""Pieces the server-optimizer and drift-correction methods share: which state entries a server step moves,
FedAvg's mean as a pseudo-gradient, and element-wise updates of state dicts in float64.

A server optimizer (FedAvgM, FedAdam, FedYogi, FedAdagrad) steps the trainable weights only;
BatchNorm's running statistics (``*.running_mean``, ``*.running_var``: buffers, not parameters) take FedAvg's
weighted mean, so a running variance never leaves the clients' convex hull, and integer buffers take
FedAvg's maximum.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch

from fedaug.api import ClientUpdate
from fedaug.errors import FedaugError
from fedaug.types import StateDict

STATISTIC_SUFFIXES = ("running_mean", "running_var")
STEPS_METRIC = "train/steps"


def local_steps(update: ClientUpdate) -> int:
    """The number of local steps ``update``'s client took (``train/steps`` of its metrics, which
    :func:`fedaug.training.loop.train_local` logs)."""
    steps = update.metrics.get(STEPS_METRIC)
    if steps is None or steps < 1:
        raise FedaugError(f"need {STEPS_METRIC} >= 1 in every client update, got {steps!r}")
    return int(steps)


def stepped_keys(state: Mapping[str, torch.Tensor]) -> list[str]:
    """The floating entries of ``state`` a server step moves: every one but BN's running statistics."""
    return [
        key
        for key, value in state.items()
        if value.is_floating_point() and not key.endswith(STATISTIC_SUFFIXES)
    ]


def filled_like(state: Mapping[str, torch.Tensor], keys: Iterable[str], fill: float = 0.0) -> StateDict:
    """``fill`` in float64, in the shape and on the device of ``state[key]``, for every key (a server
    optimizer's moments, kept in float64 so that a step of FedAvg's size rounds back to FedAvg exactly)."""
    return {key: torch.full_like(state[key], fill, dtype=torch.float64) for key in keys}


def client_delta(global_state: StateDict, average: StateDict, keys: Iterable[str]) -> StateDict:
    """``average - global`` in float64 for ``keys`` (Reddi et al.'s Delta_t, the negative pseudo-gradient).

    Both are float32 (or another floating dtype) values, so their difference in float64 is exact, and
    ``global + (average - global)`` rounds back to ``average`` exactly.
    """
    return {key: average[key].to(torch.float64) - global_state[key].to(torch.float64) for key in keys}


def apply_step(
    global_state: StateDict,
    average: StateDict,
    step: Mapping[str, torch.Tensor],
) -> StateDict:
    """The new global state: ``global + step`` (in float64, cast to the entry's dtype) for the stepped keys,
    FedAvg's ``average`` for every other entry, in ``global_state``'s key order."""
    result: StateDict = {}
    for key, value in global_state.items():
        if key in step:
            result[key] = (value.to(torch.float64) + step[key]).to(value.dtype)
        else:
            result[key] = average[key]
    return result


def map_states(
    fn: Callable[..., torch.Tensor], *states: Mapping[str, torch.Tensor], keys: Iterable[str]
) -> StateDict:
    """``{key: fn(s1[key], s2[key], ...)}`` for ``keys``."""
    return {key: fn(*(state[key] for state in states)) for key in keys}
