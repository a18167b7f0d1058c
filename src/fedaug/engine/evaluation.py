"""Evaluation of a model on a test set: large batches, no autograd."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedaug.runtime.precision import autocast
from fedaug.training.loop import load_weights
from fedaug.types import Metrics


@torch.inference_mode()
def evaluate(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    *,
    num_classes: int,
    batch_size: int = 1024,
    precision: str = "float32",
) -> Metrics:
    """Accuracy, mean cross-entropy and per-class accuracy of ``model`` on ``(x, y)``.

    ``precision="bf16"`` runs the forward pass under bfloat16 autocast (float32 logits and loss).

    Returns:
        ``{"acc", "loss", "class_acc_var"}`` plus ``"class_acc/<c>"`` for every class present in y.
        Accuracies are fractions in [0, 1].
    """
    model.eval()
    # Sums stay on x's device and are read once at the end, together: one host-device sync on a GPU.
    correct = torch.zeros(num_classes, dtype=torch.float64, device=y.device)
    counts = torch.zeros(num_classes, dtype=torch.float64, device=y.device)
    total_loss = torch.zeros(1, dtype=torch.float64, device=y.device)
    for start in range(0, y.shape[0], batch_size):
        with autocast(model, precision):
            logits = model(x[start : start + batch_size])
        target = y[start : start + batch_size]
        total_loss += F.cross_entropy(logits.float(), target, reduction="sum").double()
        hits = (logits.argmax(dim=1) == target).to(torch.float64)
        correct.index_add_(0, target, hits)
        counts.index_add_(0, target, torch.ones_like(hits))  # a bincount on a GPU would read max(y) first
    host = torch.cat([correct, counts, total_loss]).cpu()
    correct, counts, total_loss = host[:num_classes], host[num_classes:-1], host[-1]
    present = counts > 0
    class_acc = correct[present] / counts[present]
    metrics: Metrics = {
        "acc": float(correct.sum() / counts.sum()),
        "loss": float(total_loss) / y.shape[0],
        "class_acc_var": float(class_acc.var(unbiased=False)) if class_acc.numel() > 1 else 0.0,
    }
    for cls in torch.nonzero(present).flatten().tolist():
        metrics[f"class_acc/{cls}"] = float(correct[cls] / counts[cls])
    return metrics


def evaluate_weights(
    model: nn.Module, weights: Mapping[str, Tensor], test: Callable[[nn.Module], Metrics]
) -> Metrics:
    """``test(model)`` with ``weights`` loaded into ``model`` first (one client's model of several)."""
    load_weights(model, weights)
    return test(model)
