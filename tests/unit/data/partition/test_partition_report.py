"""describe() and plot_heatmap()."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from fedaug.data.partition import describe, make_partition, plot_heatmap
from fedaug.errors import FedaugError


def test_describe_small_partition_lists_every_client() -> None:
    # Prepare
    labels = np.array([0, 1, 2] * 4)
    partition = make_partition(
        labels, name="quantity", num_classes=3, seed=0, num_clients=2, classes_per_client=1
    )
    # Execute
    text = describe(partition, labels, class_names=["walk", "sit", "lay"])
    # Assert
    lines = text.splitlines()
    assert lines[1].split() == ["client", "train", "walk", "sit", "lay"]
    assert lines[2].split() == ["0", "8", "4", "0", "4"]
    assert lines[3].split() == ["1", "4", "0", "4", "0"]
    assert "client size: min 4, mean 6.0, max 8" in text
    assert "classes per client: mean 1.50" in text


def test_describe_many_clients_is_compact() -> None:
    # Prepare
    labels = np.tile(np.arange(6), 100)
    partition = make_partition(
        labels, name="dirichlet", num_classes=6, seed=0, num_clients=50, alpha=0.5, local_test_fraction=0.2
    )
    # Execute
    text = describe(partition, labels)
    # Assert
    assert len(text.splitlines()) < 30
    assert "... (35 more clients)" in text
    assert "test" in text.splitlines()[1]
    assert partition.test_indices is not None
    num_test = sum(part.size for part in partition.test_indices)
    assert f"clients: 50, samples: {600 - num_test}, local test samples: {num_test}" in text


def test_describe_rejects_wrong_class_names() -> None:
    # Prepare
    labels = np.arange(3)
    partition = make_partition(labels, name="iid", num_classes=3, seed=0, num_clients=1)
    # Execute / Assert
    with pytest.raises(FedaugError, match="class_names has 2 entries, expected 3"):
        describe(partition, labels, class_names=["a", "b"])


def test_heatmap_writes_png_and_pdf(tmp_path: Path) -> None:
    # Prepare
    pytest.importorskip("matplotlib")
    counts = np.random.default_rng(0).integers(0, 50, size=(30, 6))
    # Execute
    plot_heatmap(counts, tmp_path / "plots" / "heat.pdf", "Dir(0.3), K=30")
    # Assert
    png = tmp_path / "plots" / "heat.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "plots" / "heat.pdf").read_bytes()[:4] == b"%PDF"


def test_heatmap_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: make the matplotlib imports fail
    for module in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, module, None)
    # Execute / Assert
    with pytest.raises(FedaugError, match=r"pip install fedaug\[plots\]"):
        plot_heatmap(np.ones((2, 2)), tmp_path / "x.png", "t")
