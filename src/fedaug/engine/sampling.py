"""Client sampling: a seeded, round-keyed draw without replacement."""

from __future__ import annotations

from fedaug.runtime.seeding import numpy_rng
from fedaug.types import ClientId


def clients_per_round(num_clients: int, fraction: float) -> int:
    """``max(1, floor(fraction * num_clients))``, as Flower and the FLea scripts (K/10) do."""
    return max(1, int(fraction * num_clients + 1e-9))


def sample_clients(run_seed: int, round_num: int, num_clients: int, num_sampled: int) -> list[ClientId]:
    """The sorted ids of the clients taking part in ``round_num`` (the same on every resume)."""
    if num_sampled >= num_clients:
        return list(range(num_clients))
    rng = numpy_rng(run_seed, "sample", round_num)
    return sorted(int(c) for c in rng.choice(num_clients, size=num_sampled, replace=False))
