"""Training-mode BatchNorm layers with another forward for the span of a block (:func:`batchnorm_forwards`).

Two computations need BatchNorm statistics over something other than the whole batch, without changing the
models: FLea's fused head passes (each part of a concatenated batch on its own,
:mod:`fedaug.methods.flea.head_passes`) and padded batched clients (each client's real rows only,
:mod:`fedaug.engine.batched.padded`). Both give the affected layers an instance ``forward`` for the block and
take it
away afterwards, so every other use of the model (and ``functional_call``, which swaps the weights the
forward reads) is unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator

from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm


@contextlib.contextmanager
def batchnorm_forwards(
    modules: Iterable[nn.Module], forward: Callable[[_BatchNorm], Callable[[Tensor], Tensor]]
) -> Iterator[None]:
    """Inside the block, each training-mode BatchNorm among ``modules`` runs ``forward(layer)`` instead of its
    own forward (layers in eval mode normalise with running statistics, per sample: they keep theirs)."""
    layers = [m for m in modules if isinstance(m, _BatchNorm) and m.training]
    for m in layers:
        m.forward = forward(m)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        for m in layers:
            del m.forward
