"""FLea's buffer plumbing: cycling buffer batches, the shared subset, and feature exposure bookkeeping."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


class BufferStream:
    """Indices into a buffer of ``size`` entries, shuffled and cycling (a new permutation per pass).

    Paper: the buffer is "divided into equal-sized batches" of the local batch size; when it is smaller than
    the local data it cycles (as the official code's loader does), so every local batch gets a full partner.

    Each permutation is drawn on the CPU from ``generator`` (the same indices on every device) and moved to
    ``device`` (that of the buffer they index) once per pass, so :meth:`take` copies nothing per batch.
    """

    def __init__(
        self, size: int, generator: torch.Generator, device: torch.device | str | None = None
    ) -> None:
        self.size = size
        self.generator = generator
        self.device = torch.device("cpu") if device is None else torch.device(device)
        self._order = torch.empty(0, dtype=torch.long, device=self.device)
        self._pos = 0

    def take(self, count: int) -> Tensor:
        parts = []
        while count > 0:
            if self._pos >= self._order.shape[0]:
                # non_blocking: a host-to-device copy of pageable memory is safe and spares a stream sync.
                perm = torch.randperm(self.size, generator=self.generator)
                self._order = perm.to(self.device, non_blocking=True)
                self._pos = 0
            chunk = self._order[self._pos : self._pos + count]
            self._pos += chunk.shape[0]
            count -= chunk.shape[0]
            parts.append(chunk)
        return torch.cat(parts)


def share_indices(
    num_examples: int, fraction: float, generator: torch.Generator, fixed_seed: int | None, client_id: int
) -> Tensor:
    """The local samples a client featurises and shares: floor(fraction * n) of them, without replacement.

    ``fixed_seed`` None draws a fresh subset each time (paper: "each client randomly selects an alpha
    fraction"); otherwise the subset depends only on (seed, client), the same every round (official code).

    # Paper is silent on rounding: floor, as the official code (clients with n < 10 share nothing at 10%).
    # Deviation from official code: no duplicates (the official draw is with replacement).
    """
    count = int(fraction * num_examples + 1e-9)
    if fixed_seed is not None:
        generator = torch.Generator().manual_seed((fixed_seed * 1_000_003 + client_id) % (2**63))
    return torch.randperm(num_examples, generator=generator)[:count]


def exposure_update(pairs: Tensor, sources: Tensor, receivers: Sequence[int], num_clients: int) -> Tensor:
    """Adds the pairs (i, j) and (j, i) for every source i in the buffer and receiver j; returns sorted ids.

    Feature exposure (FLea paper; docs/methods/flea.md): xi_ij = 1 once features of i reached j or of j
    reached i; a pair is stored as ``i * K + j``. The exposure eps(t) is ``len(pairs) / K^2``
    (FedData/FedMix, where everyone gets everything, reach 1). The result lives on the device of ``pairs``
    (the server state's).
    """
    if sources.numel() == 0 or not receivers:
        return pairs
    src = torch.unique(sources).to(pairs.device)
    dst = torch.as_tensor(list(receivers), dtype=torch.long, device=pairs.device)
    grid_s, grid_d = torch.meshgrid(src, dst, indexing="ij")
    new = torch.cat([(grid_s * num_clients + grid_d).flatten(), (grid_d * num_clients + grid_s).flatten()])
    unique: Tensor = torch.unique(torch.cat([pairs, new]))
    return unique
