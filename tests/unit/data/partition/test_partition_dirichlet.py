"""Distribution-based label skew Dir(alpha) (NIID-Bench hetero-dir)."""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug.data.partition import dirichlet
from fedaug.data.partition.dirichlet import default_min_size
from fedaug.errors import PartitionError

ValidityCheck = Callable[[list[np.ndarray], int, int], None]
CountsFn = Callable[[list[np.ndarray], np.ndarray, int], np.ndarray]
# the package exports the function under the module's name
dirichlet_module = importlib.import_module("fedaug.data.partition.dirichlet")


def _run(labels: np.ndarray, num_clients: int, seed: int = 0, **params: object) -> list[np.ndarray]:
    num_classes = int(labels.max()) + 1
    rng = np.random.default_rng(seed)
    return dirichlet(labels, num_clients=num_clients, num_classes=num_classes, rng=rng, **params)  # type: ignore[arg-type]


def test_large_alpha_gives_near_uniform_histograms(class_counts: CountsFn) -> None:
    # Prepare: 6 classes x 1000 samples, 10 clients -> 100 per client and class on average
    labels = np.repeat(np.arange(6), 1000)
    # Execute
    parts = _run(labels, 10, alpha=1e5)
    # Assert
    counts = class_counts(parts, labels, 6)
    assert np.abs(counts - 100).max() <= 3


def test_small_alpha_gives_label_skew(class_counts: CountsFn) -> None:
    # Prepare
    labels = np.repeat(np.arange(6), 1000)
    # Execute
    skewed = class_counts(_run(labels, 10, alpha=0.05, min_size=0), labels, 6)
    uniform = class_counts(_run(labels, 10, alpha=100.0, min_size=0), labels, 6)
    # Assert: with small alpha most clients miss most classes; the largest class share is near 1
    assert (skewed > 0).sum(axis=1).mean() < 3
    assert (skewed.max(axis=1) / np.maximum(skewed.sum(axis=1), 1)).mean() > 0.6
    assert (uniform > 0).all()


@settings(max_examples=25, deadline=None)
@given(alpha=st.floats(0.3, 10.0), num_clients=st.integers(1, 30), seed=st.integers(0, 10**6))
def test_min_size_is_met(
    alpha: float, num_clients: int, seed: int, assert_valid_partition: ValidityCheck
) -> None:
    # Prepare: a strict min_size of a quarter of the mean client size
    labels = np.tile(np.arange(4), 60)
    min_size = 240 // (4 * num_clients)
    # Execute
    parts = _run(labels, num_clients, seed, alpha=alpha, min_size=min_size)
    # Assert
    assert_valid_partition(parts, 240, num_clients)
    assert min(part.size for part in parts) >= min_size


def test_retry_replaces_a_draw_that_misses_min_size(assert_valid_partition: ValidityCheck) -> None:
    # Prepare: the first draw for seed 0 leaves a client below 15 samples
    labels = np.tile(np.arange(6), 100)
    first_draw = _run(labels, 20, seed=0, alpha=0.5, min_size=0)
    assert min(part.size for part in first_draw) < 15
    # Execute
    parts = _run(labels, 20, seed=0, alpha=0.5, min_size=15)
    # Assert
    assert min(part.size for part in parts) >= 15
    assert_valid_partition(parts, 600, 20)


def test_impossible_min_size_raises_quickly() -> None:
    # Prepare: every client would need exactly N/K samples
    labels = np.tile(np.arange(6), 100)
    start = time.perf_counter()
    # Execute / Assert
    with pytest.raises(PartitionError, match=r"min_size=30 cannot be met.*smaller min_size, a larger alpha"):
        _run(labels, 20, alpha=0.1, min_size=30)
    assert time.perf_counter() - start < 5.0


def test_min_size_above_mean_raises_at_once() -> None:
    # Execute / Assert
    with pytest.raises(PartitionError, match="20 clients x 31 > 600 samples"):
        _run(np.tile(np.arange(6), 100), 20, alpha=1.0, min_size=31)


@pytest.mark.parametrize("alpha", [-1.0, 0.0, float("nan")])
def test_non_positive_alpha(alpha: float) -> None:
    # Execute / Assert
    with pytest.raises(PartitionError, match=f"alpha must be a finite number > 0, got {alpha}"):
        _run(np.tile(np.arange(3), 10), 3, alpha=alpha)


def test_default_min_size_is_num_classes_capped_by_half_mean_size() -> None:
    # Assert
    assert default_min_size(7352, 75, 6) == 6  # UCI-HAR K=75, as the official code
    assert default_min_size(50000, 500, 10) == 10  # CIFAR-10 K=500
    assert default_min_size(100, 20, 10) == 2  # scarce: N/K = 5
    assert default_min_size(10, 10, 10) == 1


def test_default_min_size_relaxes_but_explicit_is_strict(caplog: pytest.LogCaptureFixture) -> None:
    # Prepare: 30 clients, alpha 0.1: a draw with every client >= 6 is very rare
    labels = np.tile(np.arange(6), 100)
    # Execute
    with caplog.at_level(logging.INFO, logger="fedaug.data.partition.dirichlet"):
        parts = _run(labels, 30, alpha=0.1, max_tries=50)
    # Assert
    assert "relaxing" in caplog.text
    assert min(part.size for part in parts) >= 1
    with pytest.raises(PartitionError, match="min_size=6 cannot be met"):
        _run(labels, 30, alpha=0.1, min_size=6, max_tries=50)


def test_default_min_size_keeps_drawing_for_one_sample_a_client(
    assert_valid_partition: ValidityCheck,
) -> None:
    # Prepare: UCI-HAR's class sizes, K = 150, alpha = 0.1 (FLea Table 1): about 1 draw in 1,900 gives every
    # client a sample, so 1000 tries miss it for this seed
    labels = np.repeat(np.arange(6), [1226, 1073, 986, 1286, 1374, 1407])
    with pytest.raises(PartitionError, match=r"min_size=1 cannot be met .* after 1000 tries"):
        _run(labels, 150, seed=0, alpha=0.1, min_size=1)
    # Execute
    parts = _run(labels, 150, seed=0, alpha=0.1)
    # Assert: the default target, relaxed to 1, drew on past max_tries and found one
    assert min(part.size for part in parts) == 1
    assert_valid_partition(parts, labels.size, 150)


def test_extra_draws_for_one_sample_come_after_max_tries(monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: 30 clients, alpha 0.1, max_tries 50: the default relaxes 6 -> 3 -> 1, meets 1 within 50 draws
    labels = np.tile(np.arange(6), 100)
    with_extra = _run(labels, 30, seed=3, alpha=0.1, max_tries=50)
    monkeypatch.setattr(dirichlet_module, "LAST_TARGET_TRIES", 0)  # no extra draws: the partition before them
    # Execute
    without_extra = _run(labels, 30, seed=3, alpha=0.1, max_tries=50)
    # Assert: the same partition, sample for sample
    assert min(part.size for part in with_extra) >= 1
    assert all(np.array_equal(a, b) for a, b in zip(with_extra, without_extra, strict=True))


def test_default_min_size_still_fails_when_one_sample_each_is_out_of_reach() -> None:
    # Prepare: 1 + 100 draws for the last target cannot give each of 60 clients one of 120 samples
    labels = np.tile(np.arange(6), 20)
    # Execute / Assert: the message counts every try of the last target
    with pytest.raises(PartitionError, match=r"min_size=1 cannot be met .* after 101 tries"):
        _run(labels, 60, seed=0, alpha=0.01, max_tries=1)


def test_balance_cap_limits_late_classes(assert_valid_partition: ValidityCheck) -> None:
    # Prepare
    labels = np.repeat(np.arange(10), 100)
    # Execute
    capped = _run(labels, 10, seed=1, alpha=0.1, min_size=0)
    uncapped = _run(labels, 10, seed=1, alpha=0.1, min_size=0, balance=False)
    # Assert: both valid; without the cap sizes are at least as spread
    assert_valid_partition(capped, 1000, 10)
    assert_valid_partition(uncapped, 1000, 10)


def test_index_blocks_partitions_each_contiguous_block_over_its_own_clients(
    assert_valid_partition: ValidityCheck,
) -> None:
    # Prepare: block 0 (the first 300 samples) holds classes 0-2, block 1 classes 3-5 (a subject-ordered file)
    labels = np.concatenate([np.repeat(np.arange(3), 100), np.repeat(np.arange(3, 6), 100)])
    # Execute
    parts = _run(labels, 10, alpha=0.1, min_size=3, index_blocks=2)
    # Assert: a valid partition; clients 0-4 hold only block-0 samples, clients 5-9 only block-1 samples
    assert_valid_partition(parts, labels.size, 10)
    assert all(p.size >= 3 for p in parts)
    assert all(p.max() < 300 for p in parts[:5]) and all(p.min() >= 300 for p in parts[5:])
    # ... and each half is exactly the single-block partition of that half, drawn in block order
    rng = np.random.default_rng(0)
    first = dirichlet(labels[:300], num_clients=5, num_classes=6, rng=rng, alpha=0.1, min_size=3)
    second = dirichlet(labels[300:], num_clients=5, num_classes=6, rng=rng, alpha=0.1, min_size=3)
    expected = [*first, *(idx + 300 for idx in second)]
    assert all(np.array_equal(a, b) for a, b in zip(parts, expected, strict=True))


def test_index_blocks_must_divide_the_clients() -> None:
    labels = np.repeat(np.arange(3), 30)
    with pytest.raises(PartitionError, match=r"index_blocks=2 must divide the number of clients K=5"):
        _run(labels, 5, alpha=0.5, index_blocks=2)
    with pytest.raises(PartitionError, match=r"^index_blocks must be >= 1, got 0$"):
        _run(labels, 5, alpha=0.5, index_blocks=0)
