"""make_partition: client count, parameter checks, seeding, local test split and the cache."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from fedaug import registry
from fedaug.data.partition import Partition, dirichlet, iid, local_test_split, make_partition
from fedaug.errors import ConfigError, PartitionError, RegistryError

ValidityCheck = Callable[[list[np.ndarray], int, int], None]
CountsFn = Callable[[list[np.ndarray], np.ndarray, int], np.ndarray]


@pytest.fixture
def labels() -> np.ndarray:
    return np.tile(np.arange(5), 40)  # 200 samples, 5 classes


@pytest.mark.parametrize(("num_clients", "mean_local_size"), [(None, None), (10, 20.0)])
def test_exactly_one_of_num_clients_and_mean_local_size(
    labels: np.ndarray, num_clients: int | None, mean_local_size: float | None
) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match="exactly one of num_clients and mean_local_size"):
        make_partition(
            labels,
            name="iid",
            num_classes=5,
            seed=0,
            num_clients=num_clients,
            mean_local_size=mean_local_size,
        )


def test_mean_local_size_sets_num_clients(labels: np.ndarray, assert_valid_partition: ValidityCheck) -> None:
    # Execute
    partition = make_partition(labels, name="iid", num_classes=5, seed=0, mean_local_size=30)
    # Assert: round(200 / 30) = 7
    assert partition.num_clients == 7
    assert partition.settings["num_clients"] == 7
    assert_valid_partition(partition.train_indices, 200, 7)


def test_mean_local_size_too_large(labels: np.ndarray) -> None:
    # Execute / Assert
    with pytest.raises(PartitionError, match="gives num_clients"):
        make_partition(labels, name="iid", num_classes=5, seed=0, mean_local_size=1000)


def test_more_clients_than_samples(labels: np.ndarray) -> None:
    # Execute / Assert
    with pytest.raises(PartitionError, match=r"number of samples \(200\), got 201"):
        make_partition(labels, name="iid", num_classes=5, seed=0, num_clients=201)


def test_unknown_param_lists_valid_ones(labels: np.ndarray) -> None:
    # Execute / Assert
    with pytest.raises(
        ConfigError, match=r"unknown parameter 'mu'.*valid parameters: alpha, min_size, balance"
    ):
        make_partition(labels, name="dirichlet", num_classes=5, seed=0, num_clients=5, mu=0.3)


def test_missing_required_param(labels: np.ndarray) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match="needs parameter 'alpha'"):
        make_partition(labels, name="dirichlet", num_classes=5, seed=0, num_clients=5)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("dirichlet", {"alpha": "0.3"}),
        ("dirichlet", {"alpha": 0.3, "min_size": 2.5}),
        ("dirichlet", {"alpha": 0.3, "balance": 1}),
        ("quantity", {"classes_per_client": 2.0}),
        ("quantity", {"classes_per_client": True}),
    ],
)
def test_wrong_param_type(labels: np.ndarray, name: str, params: dict) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match="must be"):
        make_partition(labels, name=name, num_classes=5, seed=0, num_clients=5, **params)


def test_numpy_and_int_values_accepted_for_float_and_int(labels: np.ndarray) -> None:
    # Execute
    partition = make_partition(
        labels, name="dirichlet", num_classes=5, seed=0, num_clients=5, alpha=1, min_size=np.int64(3)
    )
    # Assert
    assert partition.settings["params"] == {
        "alpha": 1,
        "min_size": 3,
        "balance": True,
        "max_tries": 1000,
        "index_blocks": 1,
    }


def test_unknown_partitioner(labels: np.ndarray) -> None:
    # Execute / Assert
    valid = "valid choices: dirichlet, iid, multimodal, natural, quantity, shards"
    with pytest.raises(RegistryError, match=valid):
        make_partition(labels, name="pathological", num_classes=5, seed=0, num_clients=5)


def test_negative_alpha_message(labels: np.ndarray) -> None:
    # Execute / Assert
    with pytest.raises(PartitionError, match=r"^alpha must be a finite number > 0, got -1.0$"):
        make_partition(labels, name="dirichlet", num_classes=5, seed=0, num_clients=5, alpha=-1.0)


@pytest.mark.parametrize("seed", [-1, 1.5, True])
def test_invalid_seed(labels: np.ndarray, seed: object) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match=r"seed must be (>= 0|an integer), got"):
        make_partition(labels, name="iid", num_classes=5, seed=seed, num_clients=5)  # type: ignore[arg-type]


def test_seeding_is_deterministic_and_tagged(labels: np.ndarray) -> None:
    # Execute
    first = make_partition(labels, name="dirichlet", num_classes=5, seed=3, num_clients=8, alpha=0.5)
    again = make_partition(labels, name="dirichlet", num_classes=5, seed=3, num_clients=8, alpha=0.5)
    other = make_partition(labels, name="dirichlet", num_classes=5, seed=4, num_clients=8, alpha=0.5)
    plain = iid(labels, num_clients=8, num_classes=5, rng=np.random.default_rng(3))
    tagged = make_partition(labels, name="iid", num_classes=5, seed=3, num_clients=8)
    # Assert
    assert first == again
    assert first != other
    # the partition rng mixes in a tag, so it differs from default_rng(seed)
    assert not all(np.array_equal(a, b) for a, b in zip(plain, tagged.train_indices, strict=True))


def test_local_test_split_sizes_and_union(labels: np.ndarray) -> None:
    # Execute
    full = make_partition(
        labels, name="quantity", num_classes=5, seed=0, num_clients=10, classes_per_client=2
    )
    split = make_partition(
        labels,
        name="quantity",
        num_classes=5,
        seed=0,
        num_clients=10,
        classes_per_client=2,
        local_test_fraction=0.25,
    )
    # Assert: the split only carves each client's own data; test size is round(0.25 n)
    assert split.test_indices is not None
    for whole, train, test in zip(full.train_indices, split.train_indices, split.test_indices, strict=True):
        assert np.intersect1d(train, test).size == 0
        np.testing.assert_array_equal(np.union1d(train, test), whole)
        assert test.size == int(np.floor(0.25 * whole.size + 0.5))
    assert split.class_counts(labels, split="test").sum() == sum(t.size for t in split.test_indices)


def test_local_test_split_is_stratified_and_keeps_one_training_sample() -> None:
    # Prepare
    labels = np.repeat([0, 1, 2], [10, 6, 4])
    rng = np.random.default_rng(0)
    # Execute
    train, test = local_test_split(np.arange(20), labels, 0.5, rng)
    single_train, single_test = local_test_split(np.array([7]), labels, 0.9, rng)
    # Assert
    np.testing.assert_array_equal(np.bincount(labels[test], minlength=3), [5, 3, 2])
    assert train.size == 10
    np.testing.assert_array_equal(single_train, [7])
    assert single_test.size == 0


@pytest.mark.parametrize("fraction", [-0.1, 1.0])
def test_invalid_local_test_fraction(labels: np.ndarray, fraction: float) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match=r"local_test_fraction must be a finite number in \[0, 1\), got"):
        make_partition(labels, name="iid", num_classes=5, seed=0, num_clients=5, local_test_fraction=fraction)


def test_partition_helpers(labels: np.ndarray) -> None:
    # Execute
    partition = make_partition(labels, name="iid", num_classes=5, seed=0, num_clients=3)
    # Assert
    np.testing.assert_array_equal(partition.sizes, [67, 67, 66])
    assert partition.class_counts(labels).shape == (3, 5)
    assert partition.class_counts(labels).sum() == 200
    with pytest.raises(ConfigError, match="no local test split"):
        partition.class_counts(labels, split="test")


def test_cache_round_trip(labels: np.ndarray, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare
    kwargs = {"name": "dirichlet", "num_classes": 5, "seed": 1, "num_clients": 6, "alpha": 0.3}
    made = make_partition(labels, cache_dir=tmp_path, local_test_fraction=0.2, **kwargs)
    files = list(tmp_path.glob("*.npz"))
    assert len(files) == 1

    @functools.wraps(dirichlet)
    def must_not_run(*args: object, **kw: object) -> list[np.ndarray]:
        raise AssertionError("partitioner called although the partition is cached")

    monkeypatch.setitem(registry._REGISTRY["partitioner"], "dirichlet", must_not_run)
    # Execute
    loaded = make_partition(labels, cache_dir=tmp_path, local_test_fraction=0.2, **kwargs)
    # Assert
    assert isinstance(loaded, Partition)
    assert loaded == made
    assert all(part.dtype == np.int64 for part in loaded.train_indices)


def test_cache_invalidated_by_labels_and_settings(labels: np.ndarray, tmp_path: Path) -> None:
    # Prepare
    kwargs = {"name": "quantity", "num_classes": 5, "num_clients": 10, "classes_per_client": 2}
    changed = labels.copy()
    changed[0] = 4
    # Execute
    original = make_partition(labels, seed=0, cache_dir=tmp_path, **kwargs)
    relabelled = make_partition(changed, seed=0, cache_dir=tmp_path, **kwargs)
    reseeded = make_partition(labels, seed=1, cache_dir=tmp_path, **kwargs)
    # Assert
    assert len(list(tmp_path.glob("*.npz"))) == 3
    assert relabelled != original
    assert reseeded != original
    assert relabelled.class_counts(changed).sum(axis=0)[4] == 41


def test_corrupt_cache_is_recomputed(
    labels: np.ndarray, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare
    made = make_partition(labels, name="iid", num_classes=5, seed=0, num_clients=4, cache_dir=tmp_path)
    (path,) = tmp_path.glob("*.npz")
    path.write_bytes(b"not an npz file")
    # Execute
    with caplog.at_level(logging.WARNING):
        again = make_partition(labels, name="iid", num_classes=5, seed=0, num_clients=4, cache_dir=tmp_path)
    # Assert
    assert again == made
    assert "unreadable partition cache" in caplog.text


PLUGIN_PARTITIONER = """import fedaug, numpy as np
@fedaug.register_partitioner("halves_for_cache")
def halves(labels, *, num_clients, num_classes, rng):
    return [part for part in np.array_split(np.arange(labels.size), num_clients)]
"""


def test_a_plugin_partitioners_cache_is_made_again_when_its_file_changes(
    labels: np.ndarray, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from fedaug.plugins import import_plugins
    from tests.plugin_fixtures import isolated_plugins

    plugin = tmp_path / "halves_plugin.py"
    plugin.write_text(PLUGIN_PARTITIONER)
    kwargs = {"name": "halves_for_cache", "num_classes": 5, "seed": 0, "num_clients": 4}
    with isolated_plugins():
        import_plugins([str(plugin)])
        first = make_partition(labels, cache_dir=tmp_path / "cache", **kwargs)
        with caplog.at_level(logging.WARNING):
            assert make_partition(labels, cache_dir=tmp_path / "cache", **kwargs) == first
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # same code: reused quietly
        plugin.write_text(PLUGIN_PARTITIONER + "# changed\n")
        with caplog.at_level(logging.WARNING):
            again = make_partition(labels, cache_dir=tmp_path / "cache", **kwargs)
    assert again == first
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "was made by other code of partitioner 'halves_for_cache' (plugin '" in warning
    assert "(its plugin file changed" in warning and warning.endswith("; partitioning again")
