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
    for keys in _float_groups(states[0]):  # one flat float64 accumulator per dtype and device
        first = [states[0][k] for k in keys]
        acc = torch.zeros(sum(t.numel() for t in first), dtype=torch.float64, device=first[0].device)
        for state, weight in zip(states, weights, strict=True):
            flat = torch.cat([state[k].reshape(-1) for k in keys]).to(torch.float64)
            acc.add_(flat, alpha=float(weight))
        mean = (acc / total).to(first[0].dtype)
        for key, part, like in zip(
            keys, mean.split_with_sizes([t.numel() for t in first]), first, strict=True
        ):
            result[key] = part.view(like.shape)
    for key, first_value in states[0].items():
        if not first_value.is_floating_point():
            result[key] = torch.stack([state[key] for state in states]).amax(dim=0)
    return {key: result[key] for key in states[0]}


def _float_groups(state: StateDict) -> list[list[str]]:
    """The floating keys of ``state`` grouped by dtype and device, in order: each group is averaged as one
    flat vector (a few operations per client instead of a few per tensor; on a GPU each is a launch)."""
    groups: dict[tuple[torch.dtype, torch.device], list[str]] = {}
    for key, value in state.items():
        if value.is_floating_point():
            groups.setdefault((value.dtype, value.device), []).append(key)
    return list(groups.values())
