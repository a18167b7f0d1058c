"""The values of ``engine.batched_clients`` and how each trains a round's clients at once.

* ``false``: one by one (the sequential loop; no entry here).
* ``true``: :func:`fedaug.engine.batched.stacked.train_clients`, stacked weights under ``torch.func.vmap``,
clients
  grouped by batch shape at each step.
* ``padded``: :func:`fedaug.engine.batched.padded.train_clients_padded`, every client's batch padded to one
shape and
  masked, each step one call of the same shapes, recorded as a CUDA graph with ``engine.cuda_graphs``.

Each mode's ``refusal`` (besides :func:`~fedaug.engine.batched.stacked.batching_refusal`, which every mode
applies)
says why a round's clients cannot train that way; the engine then trains them one by one and logs why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fedaug.engine.batched.padded import padded_refusal, train_clients_padded
from fedaug.engine.batched.stacked import ClientsTrainer, _Client, train_clients


@dataclass(frozen=True)
class BatchedMode:
    """How one ``engine.batched_clients`` value trains a round's clients."""

    trainer: ClientsTrainer
    refusal: Callable[[Sequence[_Client]], str | None] | None = None


BATCHED_MODES: dict[bool | str, BatchedMode] = {
    True: BatchedMode(train_clients),
    "padded": BatchedMode(train_clients_padded, padded_refusal),
}
"""The batched ``engine.batched_clients`` values (``false`` trains one by one)."""
