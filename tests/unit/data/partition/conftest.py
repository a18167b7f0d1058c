"""Shared checks for the partitioner tests, as session fixtures (test modules never import conftest)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

ValidityCheck = Callable[[list[np.ndarray], int, int], None]
CountsFn = Callable[[list[np.ndarray], np.ndarray, int], np.ndarray]


def _assert_valid_partition(parts: list[np.ndarray], num_samples: int, num_clients: int) -> None:
    """Every index in [0, N) appears exactly once; one sorted int64 array per client."""
    assert len(parts) == num_clients
    for part in parts:
        assert part.dtype == np.int64
        assert part.ndim == 1
        assert np.all(np.diff(part) > 0)
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    np.testing.assert_array_equal(np.sort(flat), np.arange(num_samples))


def _class_counts(parts: list[np.ndarray], labels: np.ndarray, num_classes: int) -> np.ndarray:
    """[clients, classes] sample counts."""
    return np.stack([np.bincount(labels[part], minlength=num_classes) for part in parts])


@pytest.fixture(scope="session")
def assert_valid_partition() -> ValidityCheck:
    """``check(parts, num_samples, num_clients)``: asserts a valid partition."""
    return _assert_valid_partition


@pytest.fixture(scope="session")
def class_counts() -> CountsFn:
    """``counts(parts, labels, num_classes) -> [clients, classes]``."""
    return _class_counts
