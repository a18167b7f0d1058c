"""Every random draw in a run derives from the run seed through :func:`seed_for`.

There is no global seeding: each consumer asks for a generator keyed by what it is for
(``"init"``, ``("sample", round_num)``, ``("client", round_num, client_id)``), so a resumed run draws exactly
what an uninterrupted run would have drawn, whatever happened before.
"""

from __future__ import annotations

import hashlib
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn


def _key_to_int(key: int | str) -> int:
    if isinstance(key, int):
        return key & 0xFFFFFFFF
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little")


def seed_for(run_seed: int, *keys: int | str) -> int:
    """A 63-bit seed derived from the run seed and a tuple of keys (strings or ints)."""
    entropy = [run_seed & 0xFFFFFFFF, (run_seed >> 32) & 0xFFFFFFFF, *(_key_to_int(k) for k in keys)]
    state = np.random.SeedSequence(entropy).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 32 | int(state[1])) & 0x7FFF_FFFF_FFFF_FFFF)


def torch_generator(run_seed: int, *keys: int | str) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded by :func:`seed_for`."""
    generator = torch.Generator()
    generator.manual_seed(seed_for(run_seed, *keys))
    return generator


def numpy_rng(run_seed: int, *keys: int | str) -> np.random.Generator:
    """A ``np.random.Generator`` seeded by :func:`seed_for`."""
    return np.random.default_rng(seed_for(run_seed, *keys))


ModuleT = TypeVar("ModuleT", bound=nn.Module)


def uninitialised(cls: type[ModuleT], *args: Any, **kwargs: Any) -> ModuleT:
    """``cls(*args, **kwargs)`` allocated without its default initialisation.

    Default initialisers draw from torch's global RNG; methods that build modules during a run (FedBR's
    discriminator, FedGen's generator) allocate them with this and fill the weights from a keyed generator.
    """
    module: ModuleT = nn.utils.skip_init(cls, *args, **kwargs)  # type: ignore[no-untyped-call]
    return module
