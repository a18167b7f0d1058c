"""Helpers shared by the experiment tests (and ``fedaug zsdg``'s): a small setup every branching method
accepts, and sweep files and points of the smoke preset."""

from __future__ import annotations

from pathlib import Path

from fedaug.sweeps.order import SweepPoint
from fedaug.sweeps.sweep import expand_sweep
from tests.conftest import SMOKE

# 28x28 one-channel blobs and the BN CNN: Fed-ZDA needs batch norm, FedGen's generator image-sized inputs
BASE = [
    "data.options.shape=[1, 28, 28]",
    "data.options.num_classes=3",
    "data.options.num_train=96",
    "data.options.num_test=30",
    "partition=iid",
    "partition.num_clients=4",
    "model=bn_cnn_mnist",
    "train.rounds=4",
    "train.clients_per_round=2",
    "train.batch_size=16",
    "train.optimizer=sgd",
    "train.lr=0.02",
    "engine.num_threads=1",
    "engine.progress=false",
]
ZDAS = "{name: fedzdas, start_round: 3, samples_per_class: 1, gen_iterations: 3}"
"""A Fed-ZDAS grid value that is FedAvg in rounds 1-2 (so it branches from FedAvg's round-2 checkpoint)."""


def write_sweep(tmp_path: Path, body: str) -> Path:
    """``tmp_path/sweep.yaml``: the smoke preset as sweep ``sw`` into ``tmp_path/runs``, then ``body``."""
    path = tmp_path / "sweep.yaml"
    path.write_text(f"extends: {SMOKE}\nname: sw\nout_dir: {tmp_path / 'runs'}\n{body}")
    return path


def sweep_points(tmp_path: Path, methods: str, *extra: str) -> list[SweepPoint]:
    """The points of a sweep over ``methods`` (a YAML list) on :data:`BASE`, branching from FedAvg and keeping
    its round-2 checkpoint; ``extra``: more overrides."""
    sweep = write_sweep(tmp_path, f"grid:\n  method: {methods}\n")
    overrides = [*BASE, "engine.branch_from_fedavg=true", "engine.keep_checkpoints=[2]", *extra]
    return expand_sweep(sweep, overrides)
