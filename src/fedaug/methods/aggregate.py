"""Aggregation of client weights (FedAvg's weighted mean, BN running statistics included)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

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
    for key, first in states[0].items():
        if first.is_floating_point():
            acc = torch.zeros(first.shape, dtype=torch.float64, device=first.device)
            for state, weight in zip(states, weights, strict=True):
                acc.add_(state[key].to(torch.float64), alpha=float(weight))
            result[key] = (acc / total).to(first.dtype)
        else:
            result[key] = torch.stack([state[key] for state in states]).amax(dim=0)
    return result
