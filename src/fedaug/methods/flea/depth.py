"""FLea's sharing depth, ``method.split_layer``: the layers a model offers with what each shares per sample,
and the feature buffer's memory at the chosen one.

The split layer l decides what leaves a client: its activations after block l (``-1``: the raw input). A
deeper layer shares a smaller or more abstract row; how much less an attacker recovers from it is only
measured (docs/guide/privacy-attacks.md), never guaranteed. The memory stated is the buffer a round's
clients fill: ``bytes per shared sample x samples``, the samples being the ``buffer_rounds`` largest shares
of the round's clients (floor(alpha n_k) each) -- an upper bound, reached when the largest clients share
together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fedaug.api import RunContext
from fedaug.errors import IncompatibleModelError
from fedaug.models.base import SplitModel

LABEL_BYTES = 8
"""Bytes of one shared label (int64), sent with every shared row."""


def sample_bytes(model: SplitModel, input_shape: tuple[int, ...], layer: int) -> tuple[tuple[int, ...], int]:
    """The activation shape at ``layer`` and the bytes of one shared sample: its row in the model's dtype
    (float32 unless the model is cast) plus its label."""
    shape = model.activation_shape(input_shape, layer)
    param = next(model.parameters(), None)
    width = 4 if param is None else param.element_size()
    return shape, math.prod(shape) * width + LABEL_BYTES


def layer_choices(model: SplitModel, input_shape: tuple[int, ...]) -> str:
    """Every valid split layer with what it shares, e.g. ``-1 (raw input [1, 28, 28], 3,144 B), 0 ([6, 14,
    14], 4,712 B), ...`` (bytes per shared sample, label included)."""
    parts = []
    for layer in model.split_layers:
        shape, size = sample_bytes(model, input_shape, layer)
        where = "raw input " if layer == -1 else ""
        parts.append(f"{layer} ({where}{list(shape)}, {size:,} B)")
    return ", ".join(parts)


def check_layer(model: SplitModel, layer: int, input_shape: tuple[int, ...]) -> int:
    """``layer`` if ``model`` has it, else IncompatibleModelError naming ``method.split_layer``, the bad value
    and every valid layer with its activation shape and bytes per shared sample."""
    try:
        return model.check_split(layer)
    except IncompatibleModelError as exc:
        raise IncompatibleModelError(
            f"method.split_layer: {exc} (what each shares per sample, with its label: "
            f"{layer_choices(model, input_shape)})"
        ) from None


@dataclass(frozen=True)
class BufferMemory:
    """What FLea's buffer holds at one split layer.

    Attributes:
        layer: the split layer.
        shape: one shared activation's shape (without the batch).
        bytes_per_sample: one shared row plus its label, in bytes.
        max_samples: the most samples one buffer holds (module docstring).
        clients: the clients of a round whose shares it counts.
        rounds: the rounds of shares it keeps (``buffer_rounds``).
    """

    layer: int
    shape: tuple[int, ...]
    bytes_per_sample: int
    max_samples: int
    clients: int
    rounds: int

    @property
    def total_bytes(self) -> int:
        return self.bytes_per_sample * self.max_samples

    def describe(self, model_name: str) -> str:
        """The run log's line, e.g. ``flea: split layer 1 of HARNet shares [128, 20, 7] per sample (71,688
        B with its label); the buffer holds at most 730 samples (10 clients x 1 round) = 52.33 MB``."""
        return (
            f"flea: split layer {self.layer} of {model_name} shares {list(self.shape)} per sample "
            f"({self.bytes_per_sample:,} B with its label); the buffer holds at most {self.max_samples:,} "
            f"samples ({self.clients} clients x {self.rounds} round{'s' if self.rounds > 1 else ''}) = "
            f"{self.total_bytes / 1e6:.2f} MB"
        )


def buffer_memory(
    model: SplitModel, layer: int, run: RunContext, *, share_fraction: float, buffer_rounds: int
) -> BufferMemory:
    """The buffer's memory at ``layer``: bytes per shared sample times the most samples it holds, the
    ``buffer_rounds * run.clients_per_round`` largest shares floor(``share_fraction`` n_k) of the clients
    (all clients when the round's size is unknown, 0)."""
    shape, size = sample_bytes(model, run.input_shape, layer)
    shares = sorted((int(share_fraction * n + 1e-9) for n in run.client_sizes), reverse=True)
    per_round = min(run.clients_per_round or run.num_clients, len(shares))
    draws = per_round * buffer_rounds
    # a client may share again in a later round of the buffer's window: cycle through the largest
    largest = [shares[i % per_round] for i in range(draws)] if shares else []
    return BufferMemory(layer, shape, size, sum(largest), per_round, buffer_rounds)
