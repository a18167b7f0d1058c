"""Means over a batch's real rows: what lets a loss hook train on padded batches.

Padded batched clients (``engine.batched_clients: padded``, :mod:`fedaug.engine.batched.padded`) give every
client a
batch of the same size, its real samples followed by zero rows, with a 0/1 mask of the real ones. A loss hook
whose every mean over the batch goes through :func:`batch_mean` (or :func:`mean_cross_entropy`, and
:func:`real_rows` for sums over rows) computes the same objective on the padded batch as on the real rows:
inside :func:`masked_rows` these take the mask into account; outside (the sequential loop, the vmap-batched
clients) they are exactly ``Tensor.mean`` and ``F.cross_entropy``, bit for bit. A hook declares that it is
written so with ``BatchableLoss(..., masked=True)``; the padded engine trains no other hook.

The mask is read from a module-level slot that the padded objective sets around its own call, inside
``torch.func.vmap``: there it is each client's ``[B]`` mask, and the helpers see it as such.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch.nn.functional as F
from torch import Tensor

_MASK: list[Tensor] = []  # the active row mask (at most one; a list so that nesting is refused, not lost)


@contextlib.contextmanager
def masked_rows(mask: Tensor) -> Iterator[None]:
    """Inside the block, :func:`batch_mean` and the other helpers count only the rows where ``mask`` (``[B]``,
    0/1 in a float dtype) is 1."""
    if _MASK:
        raise RuntimeError("masked_rows blocks do not nest")
    _MASK.append(mask)
    try:
        yield
    finally:
        _MASK.pop()


def row_mask() -> Tensor | None:
    """The active row mask (None outside :func:`masked_rows`)."""
    return _MASK[0] if _MASK else None


def batch_mean(values: Tensor, dim: int | tuple[int, ...] | None = None, *, keepdim: bool = False) -> Tensor:
    """``values.mean(dim, keepdim=keepdim)`` where every reduced dimension (all when ``dim`` is None) runs
    over the batch's rows (a ``[B]`` vector, or a ``[B, B]`` matrix of pairs): within :func:`masked_rows`, the
    mean over the real rows (pairs of real rows) only; 0 for a batch without any.

    Raises:
        ValueError: inside :func:`masked_rows`, for a reduced dimension whose size is not the mask's.
    """
    mask = row_mask()
    if mask is None:
        return values.mean() if dim is None else values.mean(dim=dim, keepdim=keepdim)
    dims = tuple(range(values.dim())) if dim is None else (dim,) if isinstance(dim, int) else dim
    weighted = values
    for d in dims:
        if values.shape[d] != mask.shape[0]:
            raise ValueError(f"a batch mean over {values.shape[d]} rows with a row mask of {mask.shape[0]}")
        shape = [1] * values.dim()
        shape[d] = -1
        weighted = weighted * mask.view(shape)
    count = mask.sum().clamp(min=1) ** len(dims)
    return weighted.sum(dim=dims, keepdim=keepdim) / count


def batch_rows(values: Tensor) -> Tensor | int:
    """The number of rows of ``values`` (an int), or in :func:`masked_rows` of real rows (a 0-d tensor)."""
    mask = row_mask()
    return values.shape[0] if mask is None else mask.sum()


def batch_var(values: Tensor, dim: int, *, keepdim: bool = False) -> Tensor:
    """``values.var(dim, keepdim=keepdim)`` (unbiased) over the batch's rows along ``dim``: in
    :func:`masked_rows`, over the real rows only (0 for fewer than two)."""
    mask = row_mask()
    if mask is None:
        return values.var(dim=dim, keepdim=keepdim)
    centred = values - batch_mean(values, dim, keepdim=True)
    count = mask.sum()
    return batch_mean(centred * centred, dim, keepdim=keepdim) * count / (count - 1).clamp(min=1)


def mean_cross_entropy(logits: Tensor, y: Tensor) -> Tensor:
    """``F.cross_entropy(logits, y)`` (integer labels, mean over the batch), over the real rows in
    :func:`masked_rows`."""
    if row_mask() is None:
        return F.cross_entropy(logits, y)
    return batch_mean(F.cross_entropy(logits, y, reduction="none"))


def real_rows(values: Tensor) -> Tensor:
    """``values`` (rows first) with the padded rows set to 0 in :func:`masked_rows`, else ``values``."""
    mask = row_mask()
    if mask is None:
        return values
    return values * mask.view(-1, *[1] * (values.dim() - 1))
