"""Fabricated run directories with known numbers (config.yaml, metrics.jsonl, summary.json)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

PARTITIONS = {
    "qua2": {"name": "quantity", "classes_per_client": 2},
    "dir0.3": {"name": "dirichlet", "alpha": 0.3},
    "dir0.1": {"name": "dirichlet", "alpha": 0.1},
}


def write_run(
    root: Path,
    *,
    method: str = "fedavg",
    seed: int = 0,
    partition: str = "qua2",
    num_clients: int = 75,
    accs: Sequence[float] = (0.5, 0.6),
    options: dict[str, Any] | None = None,
    train: dict[str, Any] | None = None,
    finished: bool = True,
    extra_metrics: dict[str, Sequence[float]] | None = None,
    engine: dict[str, Any] | None = None,
) -> Path:
    """Writes one run dir whose per-round test accuracies are ``accs``; returns its path."""
    part = {
        **PARTITIONS[partition],
        "num_clients": num_clients,
        "mean_local_size": None,
        "local_test_fraction": 0.0,
    }
    rounds = len(accs)
    config = {
        "name": "fake",
        "seed": seed,
        "out_dir": str(root),
        "data": {"name": "uci_har", "data_dir": None},
        "partition": part,
        "model": {"name": "harnet"},
        "method": {"name": method, **(options or {})},
        "train": {"rounds": rounds, "local_epochs": 5, **(train or {})},
        "engine": {"num_threads": 1, **(engine or {})},
        "compare": [],
    }
    tag = "-".join(f"{k}{v}" for k, v in sorted((options or {}).items())) or "default"
    run_dir = root / f"uci_har-{partition}-K{num_clients}" / method / tag / f"seed{seed}"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    records = []
    for index, acc in enumerate(accs):
        record = {"round": index + 1, "test/acc": acc}
        for key, values in (extra_metrics or {}).items():
            record[key] = values[index]
        records.append(record)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if finished:
        tail = list(accs[-10:])
        best = max(range(rounds), key=lambda i: (accs[i], -i))
        summary = {
            "rounds": rounds,
            "best_acc": accs[best],
            "best_round": best + 1,
            "last10_acc": sum(tail) / len(tail),
            "final_acc": accs[-1],
        }
        (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


@pytest.fixture
def make_run() -> Callable[..., Path]:
    """:func:`write_run` (``make_run(root, method=..., seed=..., accs=[...])``)."""
    return write_run
