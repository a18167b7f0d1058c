"""Quantity-based label skew Qua(q)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug.data.partition import make_partition, quantity
from fedaug.errors import PartitionError

ValidityCheck = Callable[[list[np.ndarray], int, int], None]
CountsFn = Callable[[list[np.ndarray], np.ndarray, int], np.ndarray]


@settings(max_examples=40, deadline=None)
@given(
    num_classes=st.integers(1, 8),
    num_clients_over=st.integers(0, 20),
    q_seed=st.integers(0, 10**6),
)
def test_each_client_has_exactly_q_classes_including_c_mod_c(
    num_classes: int,
    num_clients_over: int,
    q_seed: int,
    assert_valid_partition: ValidityCheck,
    class_counts: CountsFn,
) -> None:
    # Prepare: enough samples per class that every holder gets at least one
    num_clients = num_classes + num_clients_over
    q = q_seed % num_classes + 1
    labels = np.repeat(np.arange(num_classes), num_clients)
    # Execute
    parts = quantity(
        labels,
        num_clients=num_clients,
        num_classes=num_classes,
        rng=np.random.default_rng(q_seed),
        classes_per_client=q,
    )
    # Assert
    assert_valid_partition(parts, labels.size, num_clients)
    counts = class_counts(parts, labels, num_classes)
    np.testing.assert_array_equal((counts > 0).sum(axis=1), q)
    for client in range(num_clients):
        assert counts[client, client % num_classes] > 0


def test_class_split_evenly_among_holders(class_counts: CountsFn) -> None:
    # Prepare
    labels = np.repeat(np.arange(4), 50)
    # Execute
    parts = quantity(
        labels, num_clients=12, num_classes=4, rng=np.random.default_rng(3), classes_per_client=2
    )
    # Assert: within each class, holders' counts differ by at most one
    counts = class_counts(parts, labels, 4)
    for k in range(4):
        held = counts[:, k][counts[:, k] > 0]
        assert held.max() - held.min() <= 1
        assert held.sum() == 50


def test_hand_example_fewer_clients_than_classes() -> None:
    # Prepare: 12 samples, classes 0,1,2 interleaved; 2 clients; q = 1.
    # Client 0 holds class 0 (0 mod 3) and class 2 (forced to 2 mod 2 = 0 so no sample is dropped);
    # client 1 holds class 1. Each class has one holder, so the result does not depend on the seed.
    labels = np.array([0, 1, 2] * 4)
    # Execute
    parts = quantity(labels, num_clients=2, num_classes=3, rng=np.random.default_rng(0), classes_per_client=1)
    # Assert
    np.testing.assert_array_equal(parts[0], [0, 2, 3, 5, 6, 8, 9, 11])
    np.testing.assert_array_equal(parts[1], [1, 4, 7, 10])


def test_hand_example_q2_fixed_seed(class_counts: CountsFn) -> None:
    # Prepare: 3 clients, 3 classes, q = 2; with this seed the extra classes drawn are 2, 2 and 1, so
    # class 0 is held by client 0 only (4 samples), class 1 by clients 1, 2 (2 + 2) and class 2 by
    # clients 0, 1, 2 (array_split of 4 -> 2, 1, 1).
    labels = np.array([0, 1, 2] * 4)
    # Execute
    parts = quantity(labels, num_clients=3, num_classes=3, rng=np.random.default_rng(0), classes_per_client=2)
    # Assert
    np.testing.assert_array_equal(parts[0], [0, 3, 5, 6, 9, 11])
    np.testing.assert_array_equal(parts[1], [1, 8, 10])
    np.testing.assert_array_equal(parts[2], [2, 4, 7])
    counts = class_counts(parts, labels, 3)
    np.testing.assert_array_equal(counts, [[4, 0, 2], [0, 2, 1], [0, 2, 1]])


@pytest.mark.parametrize("q", [0, 4])
def test_q_out_of_range_names_q_and_range(q: int) -> None:
    # Execute / Assert
    with pytest.raises(PartitionError, match=rf"between 1 and the number of classes \(3\), got {q}"):
        quantity(
            np.tile(np.arange(3), 4),
            num_clients=3,
            num_classes=3,
            rng=np.random.default_rng(0),
            classes_per_client=q,
        )


def test_make_partition_q_greater_than_classes() -> None:
    # Execute / Assert
    with pytest.raises(PartitionError, match="got 7"):
        make_partition(
            np.tile(np.arange(3), 4),
            name="quantity",
            num_classes=3,
            seed=0,
            num_clients=3,
            classes_per_client=7,
        )
