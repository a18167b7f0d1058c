"""The natural partitioner: one client per group id (UCI-HAR's subjects through a run's config), errors that
name the fix, the group ids in the cache key, and no user option that smuggles them in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedaug.cli.main import main
from fedaug.config.schema import PartitionConfig
from fedaug.data.partition import make_partition, natural
from fedaug.data.partition.natural import train_groups
from fedaug.errors import ConfigError, PartitionError

LABELS = np.array([0, 1, 2, 0, 1, 2, 0, 1])
SUBJECTS = np.array([7, 3, 7, 9, 3, 9, 7, 3])  # three subjects: 3 -> client 0, 7 -> 1, 9 -> 2


def test_one_client_per_group_id_in_sorted_order(assert_valid_partition) -> None:  # type: ignore[no-untyped-def]
    parts = natural(
        LABELS, num_clients=3, num_classes=3, rng=np.random.default_rng(0), groups={"subject": SUBJECTS}
    )
    assert_valid_partition(parts, LABELS.size, 3)
    assert [p.tolist() for p in parts] == [[1, 4, 7], [0, 2, 6], [3, 5]]


def test_the_only_group_is_the_default_and_several_need_a_name() -> None:
    rng = np.random.default_rng(0)
    two = {"subject": SUBJECTS, "site": LABELS}
    with pytest.raises(PartitionError, match=r"set partition.group to one of .*site, subject"):
        natural(LABELS, num_clients=3, num_classes=3, rng=rng, groups=two)
    parts = natural(LABELS, num_clients=3, num_classes=3, rng=rng, groups=two, group="site")
    assert [p.tolist() for p in parts] == [[0, 3, 6], [1, 4, 7], [2, 5]]
    with pytest.raises(PartitionError, match=r"no group ids 'speaker'; it has: site, subject"):
        natural(LABELS, num_clients=3, num_classes=3, rng=rng, groups=two, group="speaker")
    with pytest.raises(PartitionError, match=r"group ids \(none\)"):
        natural(LABELS, num_clients=3, num_classes=3, rng=rng, groups={})


def test_k_must_be_the_number_of_ids_and_lengths_must_match() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(PartitionError, match=r"3 subject ids, so set partition.num_clients=3, got 4"):
        natural(LABELS, num_clients=4, num_classes=3, rng=rng, groups={"subject": SUBJECTS})
    with pytest.raises(PartitionError, match=r"7 subject ids for 8 training samples"):
        natural(LABELS, num_clients=3, num_classes=3, rng=rng, groups={"subject": SUBJECTS[:7]})


def test_group_ids_enter_the_cache_key(tmp_path: Path) -> None:
    first = make_partition(
        LABELS,
        name="natural",
        num_classes=3,
        seed=0,
        num_clients=3,
        cache_dir=tmp_path,
        groups={"subject": SUBJECTS},
    )
    other = make_partition(
        LABELS,
        name="natural",
        num_classes=3,
        seed=0,
        num_clients=3,
        cache_dir=tmp_path,
        groups={"subject": SUBJECTS[::-1].copy()},
    )
    again = make_partition(
        LABELS,
        name="natural",
        num_classes=3,
        seed=0,
        num_clients=3,
        cache_dir=tmp_path,
        groups={"subject": SUBJECTS},
    )
    assert [p.tolist() for p in first.train_indices] != [p.tolist() for p in other.train_indices]
    assert [p.tolist() for p in again.train_indices] == [p.tolist() for p in first.train_indices]
    assert len(list(tmp_path.glob("partition-natural-*.npz"))) == 2


def test_groups_is_not_a_user_option() -> None:
    with pytest.raises(ConfigError, match=r"partition\.groups is not an option"):
        PartitionConfig(name="natural", num_clients=3, options={"groups": [1, 2]})


def test_train_groups_reads_the_datasets_extras() -> None:
    import torch

    extras = {"subject_train": torch.tensor([1, 2]), "subject_test": torch.tensor([3]), "mask": torch.ones(2)}
    groups = train_groups(extras)
    assert list(groups) == ["subject"] and groups["subject"].tolist() == [1, 2]


def test_uci_har_by_subject_through_the_partition_command(capsys: pytest.CaptureFixture[str]) -> None:
    # UCI-HAR's training set holds 21 of its 30 subjects
    argv = ["partition", "--set", "partition=natural", "--set", "partition.num_clients=21"]
    assert main(argv) == 0
    assert "clients: 21, samples: 7352" in capsys.readouterr().out
    assert main(["partition", "--set", "partition=natural", "--set", "partition.num_clients=30"]) == 2
    assert "set partition.num_clients=21, got 30" in capsys.readouterr().err
