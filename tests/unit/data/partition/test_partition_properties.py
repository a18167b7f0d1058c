"""Property tests shared by all partitioners: exactly-once use of indices, client count, determinism."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug import registry
from fedaug.data.partition import dirichlet, iid, multimodal, quantity, shards

ValidityCheck = Callable[[list[np.ndarray], int, int], None]
CountsFn = Callable[[list[np.ndarray], np.ndarray, int], np.ndarray]


@st.composite
def problems(draw: st.DrawFn) -> tuple[np.ndarray, int, int, int]:
    """(labels, num_classes, num_clients, seed) with every class present."""
    num_classes = draw(st.integers(1, 6))
    extra = draw(st.lists(st.integers(0, num_classes - 1), max_size=60))
    labels = np.array(list(range(num_classes)) + extra, dtype=np.int64)
    labels = labels[np.random.default_rng(draw(st.integers(0, 99))).permutation(labels.size)]
    num_clients = draw(st.integers(1, labels.size))
    return labels, num_classes, num_clients, draw(st.integers(0, 2**32 - 1))


def _run(name: str, labels: np.ndarray, num_classes: int, num_clients: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    common = {"num_clients": num_clients, "num_classes": num_classes, "rng": rng}
    if name == "iid":
        return iid(labels, **common)
    if name == "quantity":
        return quantity(labels, **common, classes_per_client=min(2, num_classes))
    if name == "dirichlet":
        return dirichlet(labels, **common, alpha=0.5, min_size=0)
    if name == "shards":
        return shards(labels, **common, shards_per_client=1 if 2 * num_clients > labels.size else 2)
    return multimodal(labels, **common, classes_per_mode=min(2, num_classes))


NAMES = ["iid", "quantity", "dirichlet", "shards", "multimodal"]


def test_all_builtins_registered() -> None:
    # Assert
    assert set(NAMES) <= set(registry.available("partitioner"))
    assert registry.get("partitioner", "dirichlet") is dirichlet


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=40, deadline=None)
@given(problem=problems())
def test_every_index_exactly_once_and_deterministic(
    name: str, problem: tuple, assert_valid_partition: ValidityCheck
) -> None:
    # Prepare
    labels, num_classes, num_clients, seed = problem
    # Execute
    first = _run(name, labels, num_classes, num_clients, seed)
    second = _run(name, labels, num_classes, num_clients, seed)
    # Assert
    assert_valid_partition(first, labels.size, num_clients)
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))


@pytest.mark.parametrize("name", NAMES)
def test_different_seeds_give_different_partitions(name: str) -> None:
    # Prepare
    labels = np.tile(np.arange(5), 40)
    # Execute
    first = _run(name, labels, 5, 10, seed=0)
    second = _run(name, labels, 5, 10, seed=1)
    # Assert
    assert not all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("num_clients", [0, 13])
def test_client_count_out_of_range_names_both_numbers(name: str, num_clients: int) -> None:
    # Prepare
    labels = np.tile(np.arange(3), 4)
    # Execute / Assert
    with pytest.raises(Exception, match=rf"number of samples \(12\), got {num_clients}") as info:
        _run(name, labels, 3, num_clients, seed=0)
    assert type(info.value).__name__ == "PartitionError"


@pytest.mark.parametrize("name", NAMES)
def test_labels_out_of_range_rejected(name: str) -> None:
    # Execute / Assert
    with pytest.raises(Exception, match=r"labels must lie in \[0, 3\)"):
        _run(name, np.array([0, 1, 2, 3]), 3, 2, seed=0)


def test_iid_sizes_differ_by_at_most_one(assert_valid_partition: ValidityCheck) -> None:
    # Execute
    parts = iid(np.zeros(103, dtype=int), num_clients=10, num_classes=1, rng=np.random.default_rng(0))
    # Assert
    sizes = [part.size for part in parts]
    assert max(sizes) - min(sizes) <= 1
    assert_valid_partition(parts, 103, 10)
