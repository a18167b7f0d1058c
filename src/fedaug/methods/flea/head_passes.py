"""Several passes of a model's head as one (:func:`fused_passes`), or one each (:data:`HEAD_PASSES`).

FLea's local objective runs the local head up to three times a step (on the mixed features, on the unmixed
local features for the extra CE, on the buffer features for the official KL). Each pass is the same layers on
a batch of the same size, so they can run as one pass over the concatenated batch: one launch per layer
instead of one per layer and pass (what a GPU step is made of), and larger matrix products.

That is exact for every layer that treats samples independently (conv, linear, pooling, ReLU, LayerNorm,
GroupNorm, BatchNorm in eval mode). It is **not** for BatchNorm in training mode: its batch statistics over
the concatenated batch mix the parts, and each separate pass would have updated the running statistics once.
So inside the fused pass every training-mode BatchNorm of the head normalises each part with that part's own
statistics and updates its running statistics part after part, in order, as the separate passes did (one
batch-norm call per part on a view, then one concatenation). The fused pass then computes what the separate
passes compute, in float64 to rounding (``tests/unit/methods/test_head_passes.py``); with dropout in the head
the draws would differ, and :func:`fusable` refuses it (the separate passes run).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from fedaug.models.base import SplitModel
from fedaug.models.batchnorm import batchnorm_forwards
from fedaug.training.row_mask import row_mask

HeadPasses = Callable[[SplitModel, Sequence[Tensor], int], list[Tensor]]


def separate_passes(model: SplitModel, parts: Sequence[Tensor], layer: int) -> list[Tensor]:
    """``model.decode(part, layer)`` for each part, in order (one head pass each)."""
    return [model.decode(part, layer) for part in parts]


def fused_passes(model: SplitModel, parts: Sequence[Tensor], layer: int) -> list[Tensor]:
    """What :func:`separate_passes` computes, in one head pass over the concatenated parts (each training-mode
    BatchNorm with per-part statistics); the separate passes where :func:`fusable` refuses."""
    if len(parts) < 2 or not fusable(model, parts, layer):
        return separate_passes(model, parts, layer)
    with batchnorm_forwards(head_modules(model, layer), lambda m: _PerPartForward(m, len(parts))):
        logits = model.decode(torch.cat(list(parts)), layer)
    return list(logits.chunk(len(parts)))


HEAD_PASSES: dict[str, HeadPasses] = {"fused": fused_passes, "separate": separate_passes}
"""How several head passes of one step run: ``fused`` or ``separate`` (one pass each); FLea's ``auto`` picks
fused on a GPU and separate on a CPU (:attr:`fedaug.methods.flea.method.FLea.head_passes`)."""


def head_modules(model: SplitModel, layer: int) -> list[nn.Module]:
    """The modules :meth:`~fedaug.models.base.SplitModel.decode` runs at split ``layer`` (with submodules)."""
    roots: list[nn.Module] = [*model.blocks[layer + 1 :], model.pool, model.classifier]
    return [m for root in roots for m in root.modules()]


def fusable(model: SplitModel, parts: Sequence[Tensor], layer: int) -> bool:
    """Whether one pass over the concatenated ``parts`` computes what separate passes do: parts of one size,
    shape and dtype, and no active dropout in the head (its draws would differ); under a row mask (padded
    batches, :mod:`fedaug.training.row_mask`) no training-mode BatchNorm in the head either (the per-part
    statistics
    here are not masked; the separate passes' masked BatchNorm is)."""
    first = parts[0]
    if any(p.shape != first.shape or p.dtype != first.dtype for p in parts):
        return False
    modules = head_modules(model, layer)
    if row_mask() is not None and any(isinstance(m, _BatchNorm) and m.training for m in modules):
        return False
    return not any(isinstance(m, nn.modules.dropout._DropoutNd) and m.training and m.p > 0 for m in modules)


class _PerPartForward:
    """A BatchNorm's forward on ``parts`` slices, each as ``_BatchNorm.forward`` in training mode runs it."""

    def __init__(self, module: _BatchNorm, parts: int) -> None:
        self.module = module
        self.parts = parts

    def __call__(self, x: Tensor) -> Tensor:
        m = self.module
        m._check_input_dim(x)  # type: ignore[no-untyped-call]
        outs = []
        for part in x.chunk(self.parts):
            momentum = 0.0 if m.momentum is None else m.momentum
            if m.track_running_stats and m.num_batches_tracked is not None:
                m.num_batches_tracked.add_(1)
                momentum = 1.0 / float(m.num_batches_tracked) if m.momentum is None else m.momentum
            outs.append(
                F.batch_norm(part, m.running_mean, m.running_var, m.weight, m.bias, True, momentum, m.eps)
            )
        return torch.cat(outs)
