"""Fairness metrics (Fed-ZDA, Sections 4.2-4.3; q-FFL's variance of client accuracies).

* Client level: the global model is evaluated on every client's local test set (``partition.local_test_
  fraction``); the mean and the variance across **all** clients of these accuracies. Lower variance = fairer.
* Class level: accuracy on the (balanced) global test set and the variance across its per-class accuracies
  (``test/class_acc_var``, computed by :func:`fedaug.engine.evaluation.evaluate`).

Variances are population variances (divide by the number of clients or classes) of accuracies as fractions;
the paper's tables report accuracy in % and variance in %^2 (multiply ours by 10^4).
Per round the engine logs ``local/acc_mean``, ``local/acc_var`` and ``local/acc`` (every client's accuracy);
:func:`fairness_summary` adds the final and last-10-evaluations values to ``summary.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from fedaug.engine.eval_cache import ClientEvalCache
from fedaug.runtime.precision import autocast
from fedaug.training.loop import load_weights
from fedaug.types import Metrics, StateDict


@torch.inference_mode()
def client_accuracies(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    client_indices: Sequence[Tensor],
    *,
    batch_size: int = 1024,
    precision: str = "float32",
) -> Tensor:
    """Accuracy of ``model`` on each client's samples ``x[idx], y[idx]``, shape ``[K]`` (float64).

    All clients' samples are predicted in one pass (concatenated), then split back; a client without
    samples gets NaN.
    """
    model.eval()
    sizes = [int(idx.numel()) for idx in client_indices]
    if sum(sizes) == 0:
        return torch.full((len(sizes),), float("nan"), dtype=torch.float64)
    order = torch.cat([idx.to(torch.long) for idx in client_indices])
    hits = []
    for start in range(0, order.numel(), batch_size):
        chunk = order[start : start + batch_size]
        with autocast(model, precision):
            logits = model(x[chunk])
        hits.append((logits.argmax(dim=1) == y[chunk]).to(torch.float64))
    correct = torch.split(torch.cat(hits).cpu(), sizes)  # one device-to-host copy for all clients
    return torch.tensor(
        [float(c.mean()) if c.numel() else float("nan") for c in correct], dtype=torch.float64
    )


def spread(values: Tensor) -> tuple[float, float]:
    """Mean and population variance of the finite entries of ``values`` (NaN entries are skipped)."""
    finite = values[torch.isfinite(values)].to(torch.float64)
    if finite.numel() == 0:
        return float("nan"), float("nan")
    return float(finite.mean()), float(finite.var(unbiased=False)) if finite.numel() > 1 else 0.0


def local_metrics(accuracies: Tensor) -> Metrics:
    """``local/acc_mean`` and ``local/acc_var`` (client-level fairness) of per-client accuracies."""
    mean, var = spread(accuracies)
    return {"local/acc_mean": mean, "local/acc_var": var}


def own_model_accuracies(
    model: nn.Module,
    states: Sequence[StateDict],
    x: Tensor,
    y: Tensor,
    client_indices: Sequence[Tensor],
    *,
    batch_size: int = 1024,
    precision: str = "float32",
    cache: ClientEvalCache[Tensor] | None = None,
) -> Tensor:
    """Accuracy of client i's own model ``states[i]`` (loaded into ``model``) on client i's samples, shape
    ``[K]`` (float64): the local test of a method that keeps a model per client (``local``). With ``cache``,
    a client whose model did not change since its last local test keeps that test's accuracy."""
    accuracies = []
    for client, (state, idx) in enumerate(zip(states, client_indices, strict=True)):
        test = partial(_own_accuracy, model, state, x, y, idx, batch_size=batch_size, precision=precision)
        accuracies.append(test() if cache is None else cache.get(client, state, test))
    return torch.cat(accuracies)


def _own_accuracy(
    model: nn.Module, state: StateDict, x: Tensor, y: Tensor, idx: Tensor, *, batch_size: int, precision: str
) -> Tensor:
    load_weights(model, state)
    return client_accuracies(model, x, y, [idx], batch_size=batch_size, precision=precision)


def mean_client(per_client: Sequence[Metrics]) -> Metrics:
    """The mean client of per-client test metrics (:func:`fedaug.engine.evaluation.evaluate` of each client's
    own model on the same test set): every metric averaged over the clients, plus the spread of their
    accuracies (``client_acc_var``: population variance; ``client_acc_min``: the worst client)."""
    keys = [key for key in per_client[0] if all(key in m for m in per_client)]
    mean: Metrics = {key: sum(m[key] for m in per_client) / len(per_client) for key in keys}
    accuracies = torch.tensor([m["acc"] for m in per_client], dtype=torch.float64)
    _, variance = spread(accuracies)
    return {**mean, "client_acc_var": variance, "client_acc_min": float(accuracies.min())}


FAIRNESS_KEYS = {
    "local_acc_mean": "local/acc_mean",
    "local_acc_var": "local/acc_var",
    "global_acc": "test/acc",
    "class_acc_var": "test/class_acc_var",
    # a method with a model per client (local): the spread of its clients' global-test accuracies
    "client_acc_var": "test/client_acc_var",
    "client_acc_min": "test/client_acc_min",
}


def fairness_summary(records: Sequence[dict[str, Any]], *, last: int = 10) -> dict[str, float]:
    """The fairness numbers of a run: final value and mean over the last ``last`` rounds of each.

    Keys: ``local_acc_mean``, ``local_acc_var``, ``global_acc``, ``class_acc_var`` and, for a method with a
    model per client (``local``), ``client_acc_var`` and ``client_acc_min`` (final round that has the
    metric) and the same with ``_last10``: the mean over the evaluations in the last ``last`` rounds, like
    ``last10_acc``. The local tests run every ``engine.local_eval_every`` rounds and at the last round, so
    with 5 that is rounds 95 and 100 of 100 (not the last 10 evaluations, which would reach back to round 55,
    into a Fed-ZDA run's FedAvg burn-in). Client-level keys are absent when the run has no local test sets.
    """
    summary: dict[str, float] = {}
    for name, key in FAIRNESS_KEYS.items():
        evaluated = [(int(r["round"]), float(r[key])) for r in records if key in r]
        if not evaluated:
            continue
        final_round, final = evaluated[-1]
        tail = [value for round_num, value in evaluated if round_num > final_round - last]
        summary[f"{name}_final"] = final
        summary[f"{name}_last10"] = sum(tail) / len(tail)
    return summary
