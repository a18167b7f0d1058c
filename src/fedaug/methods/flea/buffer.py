"""FLea's buffer plumbing: the typed buffer and server state, cycling buffer batches, the shared subset, and
feature exposure bookkeeping."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from fedaug.methods.parts.payloads import read_extra
from fedaug.runtime.device import host_to_device
from fedaug.types import Extra


@dataclass(frozen=True)
class FLeaBuffer:
    """The feature buffer FLea broadcasts with the model (``Payload.extra``: ``buffer_x``, ``buffer_y``).

    Attributes:
        x: shared activations at the split layer, ``[N, ...]`` (empty before the first share).
        y: their labels, ``[N]`` int64.
    """

    x: Tensor
    y: Tensor

    def to_extra(self) -> Extra:
        return {"buffer_x": self.x, "buffer_y": self.y}

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any]) -> FLeaBuffer:
        return cls(read_extra(extra, "buffer_x", "flea"), read_extra(extra, "buffer_y", "flea"))


@dataclass(frozen=True)
class FLeaServerState:
    """FLea's ``ServerState.extra``: the buffer, where each entry comes from, and the exposure bookkeeping.

    Attributes:
        buffer: what the next round broadcasts (``buffer_x``, ``buffer_y``).
        sources: the client each buffer entry came from (``buffer_client``), ``[N]``.
        rounds: the round after which each entry was shared (``buffer_round``), ``[N]``.
        exposure_pairs: the client pairs (i, j) whose features have met, as sorted ``i * K + j``
            (``exposure_pairs``).
        num_clients: K (``num_clients``).
        share_stats: the last share phase's means of dCor and bytes per client (``share_stats``; None, and
            absent from the extra, before the first share phase).
    """

    buffer: FLeaBuffer
    sources: Tensor
    rounds: Tensor
    exposure_pairs: Tensor
    num_clients: int
    share_stats: dict[str, float] | None = None

    @classmethod
    def empty(cls, num_clients: int, device: torch.device) -> FLeaServerState:
        """The state before any sharing, on the run's ``device`` (where every later buffer lives)."""

        def no_ids() -> Tensor:
            return torch.empty(0, dtype=torch.long, device=device)

        buffer = FLeaBuffer(torch.empty(0, device=device), no_ids())
        return cls(buffer, no_ids(), no_ids(), no_ids(), num_clients)

    def to_extra(self) -> Extra:
        extra = {
            **self.buffer.to_extra(),
            "buffer_client": self.sources,
            "buffer_round": self.rounds,
            "exposure_pairs": self.exposure_pairs,
            "num_clients": self.num_clients,
        }
        if self.share_stats is not None:
            extra["share_stats"] = self.share_stats
        return extra

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any]) -> FLeaServerState:
        def read(key: str) -> Any:
            return read_extra(extra, key, "flea")

        return cls(
            buffer=FLeaBuffer.from_extra(extra),
            sources=read("buffer_client"),
            rounds=read("buffer_round"),
            exposure_pairs=read("exposure_pairs"),
            num_clients=read("num_clients"),
            share_stats=extra.get("share_stats"),
        )


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
                perm = torch.randperm(self.size, generator=self.generator)
                self._order = host_to_device(perm, self.device)
                self._pos = 0
            chunk = self._order[self._pos : self._pos + count]
            self._pos += chunk.shape[0]
            count -= chunk.shape[0]
            parts.append(chunk)
        return torch.cat(parts)


SHARE_SUBSETS: dict[str, Callable[[int], int | None]] = {
    "fresh": lambda run_seed: None,  # paper: a new random subset every time
    "fixed": lambda run_seed: run_seed,  # official: the subset depends only on (seed, client)
}
"""``share_sampling``: the seed that fixes a client's shared subset, from the run seed (None: fresh)."""


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
    dst = host_to_device(torch.as_tensor(list(receivers), dtype=torch.long), pairs.device)
    grid_s, grid_d = torch.meshgrid(src, dst, indexing="ij")
    new = torch.cat([(grid_s * num_clients + grid_d).flatten(), (grid_d * num_clients + grid_s).flatten()])
    unique: Tensor = torch.unique(torch.cat([pairs, new]))
    return unique
