"""Aggregation of client weights (FedAvg's weighted mean, BN running statistics included)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fedaug.training.flat_state import dtype_groups, flatten, unflatten
from fedaug.types import StateDict


def weighted_average(states: Sequence[StateDict], weights: Sequence[float]) -> StateDict:
    """Weighted mean of state dicts, ``sum_i w_i s_i / sum_i w_i``, accumulated in float64.

    Floating entries (weights, biases, BN running mean/var) are averaged. Integer entries (BN's
    ``num_batches_tracked``) take the maximum over clients: they only count steps and never enter the
    forward pass with the default momentum. The result lives on the device of the states (a CUDA run's
    stay on its GPU).

    Args:
        states: one state dict per client, all with the same keys and shapes.
        weights: one non-negative weight per client (FedAvg: local data size), not all zero.
    """
    if not states or len(states) != len(weights):
        raise ValueError(f"need one weight per state, got {len(states)} states and {len(weights)} weights")
    total = float(sum(weights))
    if total <= 0:
        raise ValueError(f"weights must sum to > 0, got {list(weights)}")
    result: StateDict = {}
    first = states[0]
    for keys in dtype_groups(first):  # one flat float64 accumulator per floating dtype and device
        if not first[keys[0]].is_floating_point():
            continue
        acc = torch.zeros(
            sum(first[k].numel() for k in keys), dtype=torch.float64, device=first[keys[0]].device
        )
        for state, weight in zip(states, weights, strict=True):
            acc.add_(flatten(state, keys).to(torch.float64), alpha=float(weight))
        result.update(unflatten((acc / total).to(first[keys[0]].dtype), keys, first))
    for key, value in first.items():
        if not value.is_floating_point():
            result[key] = torch.stack([state[key] for state in states]).amax(dim=0)
    return {key: result[key] for key in first}
