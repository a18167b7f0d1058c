"""The batched clients' optimizer (fedaug.engine.batched.stacked): one update of all weights as flat rows
computes,
bit for bit, what torch.optim computes client by client and tensor by tensor."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from fedaug.api import TrainSettings
from fedaug.engine.batched.stacked import FlatRows, FunctionalOptimizer
from fedaug.errors import ConfigError

SETTINGS = TrainSettings(local_epochs=1, batch_size=8, lr=1e-2, weight_decay=1e-3)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3)).double()


@pytest.mark.parametrize(
    "settings",
    [SETTINGS, replace(SETTINGS, optimizer="sgd", momentum=0.9), replace(SETTINGS, optimizer="sgd")],
    ids=["adam", "sgd-momentum", "sgd"],
)
def test_flat_rows_step_equals_torch_optim_per_client_bit_for_bit(settings: TrainSettings) -> None:
    model, clients = _model(), 3
    named = dict(model.named_parameters())
    rows = FlatRows(named, clients)
    optimizer = FunctionalOptimizer(settings, rows)
    references = []
    for _ in range(clients):
        copy = [p.detach().clone().requires_grad_(True) for p in named.values()]
        kwargs = {"foreach": False, "weight_decay": settings.weight_decay, "lr": settings.lr}
        if settings.optimizer == "adam":
            references.append((copy, torch.optim.Adam(copy, **kwargs)))
        else:
            references.append((copy, torch.optim.SGD(copy, momentum=settings.momentum, **kwargs)))
    gen = torch.Generator().manual_seed(1)
    # step 1: every client in one call; step 2: clients 0 and 2 in one call, 1 in another (a batch of its own
    # shape); steps 3 and 4: client 1 has finished
    calls = [(1, [0, 1, 2]), (2, [0, 2]), (2, [1]), (3, [0, 2]), (4, [0, 2])]
    for step, members in calls:
        index = None if len(members) == clients else torch.tensor(members)
        grads = {
            k: torch.randn(len(members), *p.shape, generator=gen, dtype=p.dtype) for k, p in named.items()
        }
        optimizer.step_num = step
        flat = rows.take(index)
        optimizer.step(flat, rows.flatten(grads), index)
        if index is not None:
            rows.put(flat, index)
        for i, c in enumerate(members):
            params, reference = references[c]
            for p, g in zip(params, grads.values(), strict=True):
                p.grad = g[i].clone()
            reference.step()
    views = rows.views(rows.rows)
    for c, (params, _) in enumerate(references):
        for key, p in zip(named, params, strict=True):
            assert torch.equal(views[key][c], p.detach()), (c, key)


def test_weights_of_two_dtypes_are_refused_with_their_names() -> None:
    named = {"a": torch.zeros(2), "b": torch.zeros(2, dtype=torch.float64)}
    with pytest.raises(ConfigError, match=r"one dtype, got \['torch.float32', 'torch.float64'\]"):
        FlatRows(named, 2)
