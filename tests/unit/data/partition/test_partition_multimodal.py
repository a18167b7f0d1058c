"""Fed-ZDA multimodal non-i.i.d.: unequal groups of clients sharing class subsets."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug.data.partition import multimodal
from fedaug.data.partition.multimodal import mode_sizes
from fedaug.errors import PartitionError

ValidityCheck = Callable[[list[np.ndarray], int, int], None]
CountsFn = Callable[[list[np.ndarray], np.ndarray, int], np.ndarray]


@settings(max_examples=50, deadline=None)
@given(num_modes=st.integers(1, 10), extra=st.integers(0, 100), skew=st.floats(0.0, 3.0))
def test_mode_sizes_sum_to_clients(num_modes: int, extra: int, skew: float) -> None:
    # Execute
    sizes = mode_sizes(num_modes + extra, num_modes, skew)
    # Assert
    assert sizes.sum() == num_modes + extra
    assert (sizes >= 1).all()
    assert (np.diff(sizes) <= 0).all()


def test_mode_sizes_exact_values() -> None:
    # Assert
    np.testing.assert_array_equal(mode_sizes(10, 5, 0.0), [2, 2, 2, 2, 2])
    # 1 client each + 95 by Zipf quotas 41.6, 20.8, 13.9, 10.4, 8.3 (floors 41, 20, 13, 10, 8; the 3 left over
    # go to the largest remainders .87, .8, .6)
    np.testing.assert_array_equal(mode_sizes(100, 5, 1.0), [43, 22, 15, 11, 9])


def test_clients_of_a_mode_share_their_classes(
    assert_valid_partition: ValidityCheck, class_counts: CountsFn
) -> None:
    # Prepare: MNIST-like 10 classes, 100 clients in 5 modes of 2 classes
    labels = np.tile(np.arange(10), 300)
    # Execute
    parts = multimodal(
        labels, num_clients=100, num_classes=10, rng=np.random.default_rng(0), num_modes=5, classes_per_mode=2
    )
    # Assert
    assert_valid_partition(parts, labels.size, 100)
    held = class_counts(parts, labels, 10) > 0
    assert (held.sum(axis=1) == 2).all()
    start = 0
    for size in mode_sizes(100, 5, 1.0):
        group = held[start : start + size]
        assert (group == group[0]).all()  # one class combination per mode
        start += size
    combos = {tuple(np.flatnonzero(row)) for row in held}
    assert len(combos) <= 5


def test_prevalent_mode_gets_more_clients_and_more_of_shared_classes(class_counts: CountsFn) -> None:
    # Prepare: 4 classes, 4 modes of 2 classes, strong skew
    labels = np.tile(np.arange(4), 250)
    # Execute
    parts = multimodal(labels, num_clients=40, num_classes=4, rng=np.random.default_rng(2), size_skew=2.0)
    # Assert: mode 0 (clients 0..) is the largest group
    sizes = mode_sizes(40, 4, 2.0)
    assert sizes[0] > 3 * sizes[-1]
    counts = class_counts(parts, labels, 4)
    first_mode_total = counts[: sizes[0]].sum(axis=0)
    assert first_mode_total.max() > 250 / 2  # it takes most of at least one class


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"num_modes": 11}, r"num_modes must be between 1 and num_clients \(10\), got 11"),
        (
            {"classes_per_mode": 5},
            r"classes_per_mode must be between 1 and the number of classes \(4\), got 5",
        ),
        ({"size_skew": -1.0}, "size_skew must be a finite number >= 0, got -1.0"),
        ({"balance": "modes"}, "balance must be one of classes, clients, got 'modes'"),
    ],
)
def test_invalid_parameters(params: dict, message: str) -> None:
    # Execute / Assert
    with pytest.raises(PartitionError, match=message):
        multimodal(
            np.tile(np.arange(4), 10), num_clients=10, num_classes=4, rng=np.random.default_rng(0), **params
        )


def test_balance_clients_gives_equal_clients_and_imbalanced_classes(class_counts: CountsFn) -> None:
    # Prepare: 4 classes of 250, 10 clients in modes of 4, 2, 2, 2 clients (mode_sizes(10, 4, 1.0)), one class
    # per mode, so the largest share every class can give all its holders is min(250 // 4, 250 // 2) = 62
    labels = np.tile(np.arange(4), 250)
    # Execute
    parts = multimodal(
        labels,
        num_clients=10,
        num_classes=4,
        rng=np.random.default_rng(0),
        classes_per_mode=1,
        balance="clients",
    )
    # Assert
    np.testing.assert_array_equal(mode_sizes(10, 4, 1.0), [4, 2, 2, 2])
    assert [p.size for p in parts] == [62] * 10
    used = np.concatenate(parts)
    assert np.unique(used).size == used.size  # disjoint
    totals = np.bincount(labels[used], minlength=4)
    assert sorted(totals.tolist()) == [124, 124, 124, 248]  # the prevalent mode's class dominates
    held = class_counts(parts, labels, 4) > 0
    assert (held.sum(axis=1) == 1).all()
    assert (held[:4] == held[0]).all()


def test_balance_classes_is_the_default() -> None:
    # Prepare
    labels = np.tile(np.arange(4), 50)

    def draw(**params: str) -> list[np.ndarray]:
        return multimodal(labels, num_clients=8, num_classes=4, rng=np.random.default_rng(3), **params)

    # Execute / Assert
    for got, want in zip(draw(), draw(balance="classes"), strict=True):
        np.testing.assert_array_equal(got, want)
    assert sum(p.size for p in draw()) == labels.size


def test_balance_clients_needs_a_sample_per_holder() -> None:
    # Prepare: class 0 has 2 samples but all 3 clients hold it
    labels = np.array([0, 0, 1, 1, 1, 1])
    # Execute / Assert
    with pytest.raises(PartitionError, match="class 0 has 2 samples for 3 clients"):
        multimodal(
            labels,
            num_clients=3,
            num_classes=2,
            rng=np.random.default_rng(0),
            num_modes=1,
            classes_per_mode=2,
            balance="clients",
        )
