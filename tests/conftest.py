"""Shared factories: tiny synthetic clients, a tiny model, and a ready-to-run simulation spec."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fedaug.api import Method, RunContext
from fedaug.config.schema import TrainConfig
from fedaug.engine.simulation import SimulationSpec
from fedaug.methods.fedavg import FedAvg
from fedaug.models import build_model
from fedaug.models.base import SplitModel

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
SMOKE = REPO_ROOT / "configs" / "smoke.yaml"


@pytest.fixture(autouse=True)
def no_archived_estimates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Estimates in tests come from the runs the test makes, not from the checkout's ``studies/`` (a test of
    the archive's estimates sets ``FEDAUG_STUDIES`` itself)."""
    monkeypatch.setenv("FEDAUG_STUDIES", "")


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` (the offline real datasets); skips the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA


def make_blobs(
    num: int, *, num_classes: int = 3, dim: int = 8, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Linearly separable Gaussian blobs: ``x [num, dim]``, ``y [num]``."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.arange(num) % num_classes
    centers = torch.randn(num_classes, dim, generator=gen) * 3
    x = centers[y] + torch.randn(num, dim, generator=gen)
    return x, y


def make_spec(
    run_dir: Path,
    *,
    method: Method | None = None,
    num_clients: int = 3,
    samples_per_client: int = 20,
    rounds: int = 2,
    per_round: int = 3,
    seed: int = 0,
    train: TrainConfig | None = None,
    model_fn: Callable[[], SplitModel] | None = None,
) -> SimulationSpec:
    """A complete simulation on synthetic blobs and a small MLP (runs in well under a second)."""
    x, y = make_blobs(num_clients * samples_per_client + 30)
    train_x, train_y, test_x, test_y = x[:-30], y[:-30], x[-30:], y[-30:]
    indices = [torch.arange(c, train_y.shape[0], num_clients) for c in range(num_clients)]
    train = train or TrainConfig(rounds=rounds, local_epochs=1, batch_size=8)
    run = RunContext(
        num_clients=num_clients,
        num_classes=3,
        input_shape=(8,),
        seed=seed,
        num_rounds=rounds,
        client_sizes=tuple(len(i) for i in indices),
    )
    return SimulationSpec(
        method=method or FedAvg(),
        model_fn=model_fn or (lambda: build_model("mlp", num_classes=3, input_shape=(8,))),
        train_x=train_x,
        train_y=train_y,
        test_x=test_x,
        test_y=test_y,
        client_indices=indices,
        run=run,
        train_settings=train.settings,
        clients_per_round=per_round,
        run_dir=run_dir,
        progress=False,
    )
