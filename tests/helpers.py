"""Helpers shared by tests in several folders (``smoke``, ``unit``, ``gpu``): the conftest blobs as images
with a BatchNorm model, a method killed in the middle of a round, a run dir's result files, and
``benchmarks/gpu_session_summary.py`` as a module."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import torch
from torch import nn

from fedaug import registry
from fedaug.api import ClientContext, ClientUpdate, Method, Payload
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.simulation import Simulation, SimulationSpec
from fedaug.models.base import FlattenPool, SplitModel
from fedaug.runtime.device import tensor_devices
from tests.conftest import REPO_ROOT, make_spec

M = TypeVar("M", bound=Method)

IMAGE = (1, 2, 4)
"""The conftest blobs' 8 features seen as one-channel 2 x 4 images (image-only methods such as Fed-AugMix)."""


def bn_model() -> SplitModel:
    """Flatten -> Linear -> BatchNorm -> ReLU -> Linear on 1 x 2 x 4 images."""
    block = nn.Sequential(nn.Flatten(), nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU())
    return SplitModel([block], FlattenPool(), nn.Linear(16, 3))


def image_spec(run_dir: Path, name: str, device: torch.device, rounds: int = 2) -> SimulationSpec:
    """A run of method ``name`` on the 1 x 2 x 4 image blobs and :func:`bn_model`, on ``device``."""
    spec = make_spec(run_dir, method=registry.get("method", name)(), rounds=rounds, per_round=3)
    return dataclasses.replace(
        spec,
        train_x=spec.train_x.view(-1, *IMAGE),
        test_x=spec.test_x.view(-1, *IMAGE),
        run=dataclasses.replace(
            spec.run, input_shape=IMAGE, input_mean=(0.0,), input_std=(1.0,), device=device
        ),
        model_fn=bn_model,
    )


def run_on_device(run_dir: Path, name: str, device: torch.device) -> dict[str, Any]:
    """Runs method ``name`` for 2 rounds on ``device`` through the engine's seam (``RunContext.device``) and
    checks that every tensor it keeps (server state, client states, workspace models, checkpoint) is there."""
    sim = Simulation(image_spec(run_dir, name, device))
    summary = sim.run()
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["round"] for r in records] == [1, 2]
    assert all(math.isfinite(r["train/loss"]) for r in records)
    assert 0.0 <= summary["best_acc"] <= 1.0
    ckpt = torch.load(run_dir / "ckpt" / "latest.pt", weights_only=True)  # tensors where they were saved from
    kept = {"checkpoint": ckpt, "client states": sim.client_states, "workspaces": sim._workspaces}
    for what, obj in kept.items():
        assert tensor_devices(obj) <= {device}, f"{name}: {what} on {tensor_devices(obj)}, not {device}"
    assert tensor_devices(ckpt["state"]["model_state"]) == {device}
    return summary


def killed_in_round(
    method_class: type[M], *args: Any, kill_round: int, calls_before_kill: int, **kwargs: Any
) -> M:
    """``method_class(*args, **kwargs)`` 'killed' (KeyboardInterrupt) in round ``kill_round`` once
    ``calls_before_kill`` of that round's clients have trained: a run interrupted in the middle of a round.

    A subclass, not a patched instance: the engine reads from the method's class whether it may batch the
    clients (:func:`fedaug.engine.batched.stacked.batching_refusal`), and this one has a client step of its
    own.
    """

    class Killed(method_class):  # type: ignore[valid-type,misc]
        calls_left = calls_before_kill

        def client_update(self, payload: Payload, ctx: ClientContext) -> ClientUpdate:
            if payload.round_num == kill_round:
                if self.calls_left == 0:
                    raise KeyboardInterrupt
                self.calls_left -= 1
            update: ClientUpdate = super().client_update(payload, ctx)
            return update

    method: M = Killed(*args, **kwargs)
    return method


def run_files(run_dir: Path) -> tuple[str, str]:
    """The text of ``metrics.jsonl`` and ``summary.json`` in ``run_dir`` (equal files = equal runs)."""
    return (run_dir / "metrics.jsonl").read_text(), (run_dir / "summary.json").read_text()


def gpu_session_summary() -> ModuleType:
    """``benchmarks/gpu_session_summary.py`` (a script, not part of the package) loaded as a module."""
    spec = importlib.util.spec_from_file_location(
        "gpu_session_summary", REPO_ROOT / "benchmarks" / "gpu_session_summary.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def tree_paths(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key / index path into a JSON-like ``tree`` (its containers' entries, nested): where a mutation
    test can drop or replace a value."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else []
    found: list[tuple[Any, ...]] = []
    for key, value in items:
        found += [(*prefix, key), *tree_paths(value, (*prefix, key))]
    return found


def mutated(tree: Any, path: tuple[Any, ...], replacement: Any, drop: bool) -> Any:
    """A deep copy of ``tree`` with the entry at ``path`` dropped, or replaced by ``replacement``."""
    result = copy.deepcopy(tree)
    parent = result
    for key in path[:-1]:
        parent = parent[key]
    if drop:
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement
    return result
