"""A state dict as one flat tensor per dtype and device: a copy or an average then costs one operation per
group, not one per tensor (on a GPU each is a launch). Used by :func:`fedaug.training.loop.snapshot_state`
and :func:`fedaug.methods.parts.aggregate.weighted_average`."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor


def dtype_groups(state: Mapping[str, Tensor]) -> list[list[str]]:
    """The keys of ``state`` grouped by dtype and device, each group in ``state``'s order."""
    groups: dict[tuple[torch.dtype, torch.device], list[str]] = {}
    for key, value in state.items():
        groups.setdefault((value.dtype, value.device), []).append(key)
    return list(groups.values())


def flatten(state: Mapping[str, Tensor], keys: list[str]) -> Tensor:
    """The entries ``keys`` of ``state`` (one dtype and device) end to end in one new 1-D tensor."""
    return torch.cat([state[k].detach().reshape(-1) for k in keys])


def unflatten(flat: Tensor, keys: list[str], like: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Views of ``flat`` shaped as ``like``'s entries ``keys``, in the order :func:`flatten` laid them out."""
    parts = flat.split_with_sizes([like[k].numel() for k in keys])
    return {key: part.view(like[key].shape) for key, part in zip(keys, parts, strict=True)}
