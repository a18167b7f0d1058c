"""The FLea papers' feature analysis: how one round of local training on plentiful vs scarce data separates
the classes in the penultimate-layer features (KDD 2024 Section 2.3.2 / Figure 3; ICLR draft Appendix
"Experimental setup for Figure 2").

Protocol (ICLR draft): every group starts from the same global model (the papers pick one at about 40 %
accuracy: ``RUN_DIR@ROUND`` of a FedAvg run with that round kept), runs one communication round with IID
clients, and the Davies-Bouldin score (ground-truth classes as clusters, Euclidean distance; lower = better
separated) of the penultimate features is reported for the local models (mean over clients, on their own
training data and on the test set) and for the aggregated global model (test set). The groups keep the number
of training samples equal: ``plentiful`` clients of ``|D_k| = plentiful`` samples each, ``scarce`` clients of
``|D_k| = scarce`` (FedAvg), and the same scarce clients training with FLea's feature sharing (the papers'
"100 + 1000" group gave them raw samples gathered in an earlier round; here they mix with the activations the
round's clients shared with the starting model, as FLea does).

Deviation from paper: the papers ran this on CIFAR-10 (5000 vs 100 samples per client, 10 vs 50 clients);
the defaults here fit UCI-HAR's 7352 training windows (500 vs 100 samples, 10 vs 50 clients).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedaug.api import (
    ClientContext,
    ClientData,
    Method,
    Payload,
    RunContext,
    ServerState,
    ShareRequest,
    TrainSettings,
)
from fedaug.models.base import SplitModel
from fedaug.runtime.seeding import torch_generator


def davies_bouldin(features: Tensor, labels: Tensor) -> float:
    """The Davies-Bouldin score of ``features [N, d]`` clustered by ``labels [N]`` (Euclidean; computed in
    float64): the mean over clusters of ``max_j (s_i + s_j) / ||c_i - c_j||``, with ``c`` the centroids and
    ``s`` the mean distance of a cluster's points to its centroid. 0 when every centroid coincides (as
    scikit-learn's ``davies_bouldin_score``, which it equals).

    Raises:
        ValueError: with fewer than 2 clusters.
    """
    x = features.detach().reshape(features.shape[0], -1).to("cpu", torch.float64)
    y = labels.detach().cpu()
    classes = torch.unique(y)
    if classes.numel() < 2:
        raise ValueError(f"the Davies-Bouldin score needs at least 2 clusters, got {classes.numel()}")
    centroids = torch.stack([x[y == c].mean(dim=0) for c in classes])
    scatter = torch.stack([(x[y == c] - centroids[i]).norm(dim=1).mean() for i, c in enumerate(classes)])
    distances = torch.cdist(centroids, centroids)
    if torch.all(distances == 0) or torch.all(scatter == 0):
        return 0.0
    distances[distances == 0] = float("inf")
    ratios = (scatter[:, None] + scatter[None, :]) / distances
    return float(ratios.max(dim=1).values.mean())


@torch.no_grad()  # not inference_mode: the workspace models train again afterwards
def penultimate_features(model: SplitModel, x: Tensor, batch_size: int = 1024) -> Tensor:
    """The penultimate-layer features of ``model`` (eval mode) on ``x``, ``[N, d]``."""
    model.eval()
    return torch.cat([model.penultimate(x[i : i + batch_size]) for i in range(0, x.shape[0], batch_size)])


def global_scores(model: SplitModel, x: Tensor, y: Tensor) -> tuple[float, float]:
    """Accuracy of ``model`` on ``(x, y)`` and the Davies-Bouldin score of its penultimate features there
    (one forward pass for both)."""
    features = penultimate_features(model, x)
    with torch.no_grad():
        accuracy = float((model.classifier(features).argmax(dim=1) == y).double().mean())
    return accuracy, davies_bouldin(features, y)


@dataclass(frozen=True)
class Group:
    """One arm of the analysis: ``num_clients`` IID clients of ``size`` samples trained with ``method``."""

    name: str
    method: Method
    num_clients: int
    size: int


def iid_clients(labels: Tensor, num_clients: int, size: int, seed: int) -> list[Tensor]:
    """``num_clients`` disjoint IID index sets of ``size`` training samples (drawn on the CPU from
    ``seed``)."""
    if num_clients * size > labels.shape[0]:
        raise ValueError(
            f"{num_clients} clients of {size} samples need {num_clients * size} training samples; "
            f"the dataset has {labels.shape[0]}"
        )
    order = torch.randperm(labels.shape[0], generator=torch_generator(seed, "feature-analysis"))
    return [order[i * size : (i + 1) * size] for i in range(num_clients)]


def one_round(
    group: Group,
    start: ServerState,
    model_fn: Any,
    data: tuple[Tensor, Tensor, Tensor, Tensor],
    run: RunContext,
    train: TrainSettings,
) -> dict[str, Any]:
    """One round of ``group`` from the global state ``start``; DB scores and accuracies of the local models
    and of the aggregated model. ``data`` is ``(x_train, y_train, x_test, y_test)`` on ``run.device``."""
    x_train, y_train, x_test, y_test = data
    device = run.device
    workspaces: dict[str, SplitModel] = {}

    def workspace(key: str) -> SplitModel:
        if key not in workspaces:
            workspaces[key] = model_fn().to(device)
        return workspaces[key]

    clients = iid_clients(y_train.cpu(), group.num_clients, group.size, run.seed)
    sizes = tuple(len(c) for c in clients)
    run = replace(run, num_clients=len(clients), client_sizes=sizes)
    method = group.method
    state = method.init_server(start.model_state, run)
    state = ServerState(start.round_num, state.model_state, state.extra)

    def context(client: int, phase: str) -> ClientContext:
        idx = clients[client].to(device)
        return ClientContext(
            client_id=client,
            round_num=start.round_num + 1,
            data=ClientData(client, x_train[idx], y_train[idx], run.num_classes),
            model=workspace("client"),
            generator=torch_generator(run.seed, phase, start.round_num + 1, client),
            run=run,
            workspace=workspace,
        )

    ids = list(range(len(clients)))
    request = method.share_request(state, round_num=start.round_num, participants=ids, run=run)
    if request is not None:  # FLea: the round's clients share activations of the starting model first
        request = ShareRequest(request.round_num, ids, request.model_state, request.extra)
        shares = [method.client_share(request, context(c, "share")) for c in ids]
        state = method.receive_shares(state, shares, run)
    payload: Payload = method.payload(state, start.round_num + 1, train)
    local_train, local_test, updates = [], [], []
    for c in ids:
        ctx = context(c, "client")
        update = method.client_update(payload, ctx)
        updates.append(update)
        model = ctx.model
        model.load_state_dict(update.model_state)
        local_train.append(davies_bouldin(penultimate_features(model, ctx.data.x), ctx.data.y))
        local_test.append(davies_bouldin(penultimate_features(model, x_test), y_test))
    aggregated = method.server_update(state, updates, run)
    model = workspace("eval")
    model.load_state_dict(method.eval_state(aggregated))
    accuracy, db_test = global_scores(model, x_test, y_test)
    return {
        "group": group.name,
        "method": method.name,
        "clients": len(clients),
        "samples_per_client": group.size,
        "shared_features": int(payload.extra["buffer_y"].numel()) if "buffer_y" in payload.extra else 0,
        "local_db_train": _mean_std(local_train),
        "local_db_test": _mean_std(local_test),
        "global_db_test": db_test,
        "global_acc": accuracy,
    }


def _mean_std(values: Sequence[float]) -> dict[str, float]:
    array = np.asarray(values, dtype=np.float64)
    return {"mean": float(array.mean()), "std": float(array.std())}
