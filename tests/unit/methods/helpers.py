"""Helpers shared by the method tests: small models, a hand-built client, run-dir readers, FedAvg equality."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fedaug.api import ClientContext, ClientData, Method, Payload, RunContext, TrainSettings
from fedaug.config.load import load_config
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.simulation import Simulation
from fedaug.methods.fedavg import FedAvg
from fedaug.models import build_model
from fedaug.models.base import FlattenPool, SplitModel
from fedaug.runs.resolve import build_method
from fedaug.training.loop import snapshot_state
from fedaug.types import StateDict
from tests.conftest import REPO_ROOT, make_blobs, make_spec
from tests.helpers import killed_in_round, run_files

ModelFn = Callable[[], SplitModel]


def mlp_fn(*, num_classes: int = 3, dim: int = 8, **options: Any) -> ModelFn:
    """A builder of the small MLP used by the tests."""
    return lambda: build_model("mlp", num_classes=num_classes, input_shape=(dim,), **options)


def bn_mlp(num_classes: int = 3, dim: int = 8, seed: int = 0) -> SplitModel:
    """Linear -> BN -> ReLU -> Linear: the smallest model ZSDG can invert."""
    torch.manual_seed(seed)
    block = nn.Sequential(nn.Linear(dim, 16), nn.BatchNorm1d(16), nn.ReLU())
    return SplitModel([block], FlattenPool(), nn.Linear(16, num_classes))


def initial_state(model_fn: ModelFn, seed: int = 0) -> StateDict:
    """The weights of a freshly built model under a fixed seed (the 'global model' of a test)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return snapshot_state(model_fn())


def client_context(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    model_fn: ModelFn | None = None,
    num_classes: int = 3,
    client_state: Any = None,
    seed: int = 0,
) -> ClientContext:
    """One client with its own workspace models (built lazily by key, like the engine's)."""
    build = model_fn or mlp_fn(num_classes=num_classes, dim=x.shape[1])
    workspaces: dict[str, SplitModel] = {}

    def workspace(key: str) -> SplitModel:
        if key not in workspaces:
            workspaces[key] = build()
        return workspaces[key]

    run = RunContext(
        num_clients=1, num_classes=num_classes, input_shape=tuple(x.shape[1:]), seed=0, num_rounds=1
    )
    return ClientContext(
        client_id=0,
        round_num=1,
        data=ClientData(0, x, y, num_classes),
        model=workspace("client"),
        generator=torch.Generator().manual_seed(seed),
        run=run,
        client_state=client_state,
        workspace=workspace,
    )


def payload(state: StateDict, **train: Any) -> Payload:
    """A round-1 broadcast of ``state`` with the given training settings."""
    return Payload(round_num=1, model_state=state, train=TrainSettings(**train))


def skewed_client(num: int = 24, classes: tuple[int, ...] = (0, 1)) -> tuple[torch.Tensor, torch.Tensor]:
    """Blob samples of only ``classes`` (out of 3): a label-skewed client."""
    x, y = make_blobs(num * 3)
    keep = torch.isin(y, torch.tensor(classes))
    return x[keep][:num], y[keep][:num]


def run_sim(run_dir: Path, method: Method, **spec: Any) -> tuple[str, StateDict]:
    """Runs a simulation; returns ``metrics.jsonl`` text and the final global weights."""
    Simulation(make_spec(run_dir, method=method, **spec)).run()
    ckpt = torch.load(run_dir / "ckpt" / "latest.pt", weights_only=True)
    return (run_dir / "metrics.jsonl").read_text(), ckpt["state"]["model_state"]


def assert_equals_fedavg(tmp_path: Path, method: Method, **spec: Any) -> None:
    """The run of ``method`` gives bit-identical weights and FedAvg's logged numbers.

    Logged training losses may differ in float32's last bits (1e-6 relative): a method that computes the same
    cross-entropy by another formula (FedMix's soft-label CE with one-hot labels) sums in another order, and
    whether that rounds identically depends on the CPU's kernels (equal where this test was written, 1e-7
    apart on an AVX2-only CPU). The weights, which carry the gradients, and every other logged number must be
    identical.
    """
    _, fedavg_state = run_sim(tmp_path / "fedavg", FedAvg(), **spec)
    _, state = run_sim(tmp_path / method.name, method, **spec)
    assert state.keys() == fedavg_state.keys()
    assert all(torch.equal(state[key], fedavg_state[key]) for key in state)
    fedavg_records = read_jsonl(tmp_path / "fedavg" / "metrics.jsonl")
    records = read_jsonl(tmp_path / method.name / "metrics.jsonl")
    assert len(records) == len(fedavg_records)
    for record, expected in zip(records, fedavg_records, strict=True):
        for key, value in expected.items():
            if key.startswith("train/") and isinstance(value, float):
                assert record[key] == pytest.approx(value, rel=1e-6, abs=0.0), key
            else:
                assert record[key] == value, key


def method_from_yaml(name: str) -> Method:
    """The method built from ``configs/methods/<name>.yaml`` as an extra config file."""
    method: Method = build_method(load_config([REPO_ROOT / "configs" / "methods" / f"{name}.yaml"]))
    return method


def distance_to(state: StateDict, reference: StateDict) -> float:
    """Squared Euclidean distance between two states over their floating-point entries."""
    return sum(
        float((state[k] - reference[k]).pow(2).sum()) for k in reference if reference[k].is_floating_point()
    )


def linear_model(dim: int = 4, num_classes: int = 3, seed: int = 0) -> SplitModel:
    """Multinomial logistic regression as a SplitModel (a convex problem)."""
    torch.manual_seed(seed)
    return SplitModel([nn.Identity()], FlattenPool(), nn.Linear(dim, num_classes))


def skewed_convex_clients(
    per_client: int = 30, dim: int = 4, major: int = 24
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Three clients of overlapping 3-class Gaussian blobs, client k holding ``major`` samples of class k and
    the rest split over the others: heterogeneous local optima, equal sizes."""
    gen = torch.Generator().manual_seed(0)
    centers = torch.randn(3, dim, generator=gen)
    clients = []
    for k in range(3):
        minor = (per_client - major) // 2
        y = torch.tensor([k] * major + [(k + 1) % 3] * minor + [(k + 2) % 3] * (per_client - major - minor))
        x = centers[y] + torch.randn(per_client, dim, generator=gen)
        clients.append((x, y))
    return clients


def federated_rounds(
    method: Method,
    clients: list[tuple[torch.Tensor, torch.Tensor]],
    settings: TrainSettings,
    rounds: int,
    model_fn: ModelFn = linear_model,
) -> StateDict:
    """``rounds`` rounds of ``method`` with every client, through the method's own calls (init_server,
    payload, client_update with kept client states, server_update); the final global weights."""
    dim = clients[0][0].shape[1]
    run = RunContext(
        num_clients=len(clients),
        num_classes=3,
        input_shape=(dim,),
        seed=0,
        num_rounds=rounds,
        client_sizes=tuple(int(y.shape[0]) for _, y in clients),
    )
    state = method.init_server(snapshot_state(model_fn()), run)
    client_states: dict[int, Any] = {}
    model = model_fn()
    for round_num in range(1, rounds + 1):
        message = method.payload(state, round_num, settings)
        updates = []
        for k, (x, y) in enumerate(clients):
            ctx = ClientContext(
                client_id=k,
                round_num=round_num,
                data=ClientData(k, x, y, 3),
                model=model,
                generator=torch.Generator().manual_seed(round_num * 100 + k),
                run=run,
                client_state=client_states.get(k),
            )
            update = method.client_update(message, ctx)
            if update.client_state is not None:
                client_states[k] = update.client_state
            updates.append(update)
        state = method.server_update(state, updates, run)
    return state.model_state


def pooled_optimum(
    clients: list[tuple[torch.Tensor, torch.Tensor]], weight_decay: float, model_fn: ModelFn = linear_model
) -> StateDict:
    """The minimiser of the pooled data's mean cross-entropy plus ``weight_decay/2 ||w||^2`` (full-batch
    L-BFGS in float64 to convergence)."""
    model = model_fn().double()
    x = torch.cat([c[0] for c in clients]).double()
    y = torch.cat([c[1] for c in clients])
    optimizer = torch.optim.LBFGS(
        model.parameters(),
        lr=1,
        max_iter=500,
        tolerance_grad=1e-12,
        tolerance_change=1e-14,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss = loss + 0.5 * weight_decay * sum(p.pow(2).sum() for p in model.parameters())
        loss.backward()
        return loss

    for _ in range(5):
        optimizer.step(closure)
    return {k: v.float() for k, v in snapshot_state(model).items()}


def resumed_and_full(tmp_path: Path, method_cls: type[Method], **spec: Any) -> tuple[Any, Any]:
    """Runs ``method_cls()`` in full and once killed in round 3 (after one client) then resumed; asserts that
    the cut run resumed after round 2 and that both wrote the same ``metrics.jsonl`` and ``summary.json``;
    returns their final checkpoints (full, resumed)."""
    run_sim(tmp_path / "full", method_cls(), **spec)
    killed = killed_in_round(method_cls, kill_round=3, calls_before_kill=1)
    with pytest.raises(KeyboardInterrupt):
        run_sim(tmp_path / "cut", killed, **spec)
    cut_from = torch.load(tmp_path / "cut" / "ckpt" / "latest.pt", weights_only=True)["round_num"]
    assert cut_from == 2
    run_sim(tmp_path / "cut", method_cls(), **spec)
    assert run_files(tmp_path / "cut") == run_files(tmp_path / "full")
    load = partial(torch.load, weights_only=True)
    return load(tmp_path / "full" / "ckpt" / "latest.pt"), load(tmp_path / "cut" / "ckpt" / "latest.pt")


def assert_same_seed_same_metrics(tmp_path: Path, method_cls: type[Method], **spec: Any) -> None:
    """Two runs of ``method_cls()`` with the same seed write the same ``metrics.jsonl``."""
    first, _ = run_sim(tmp_path / "a", method_cls(), **spec)
    second, _ = run_sim(tmp_path / "b", method_cls(), **spec)
    assert first == second
