"""Natural splits from a user's own file: a CSV column (``data.group_column``) or an ``.npz`` key
(``data.group_key``) of group ids becomes the ``natural`` partitioner's clients, is never a feature, and each
bad input is one error naming it; a property test over random ids; ``fedaug partition``'s report and plot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedaug.cli.main import main
from fedaug.data.datasets import load_dataset
from fedaug.data.partition import make_partition
from fedaug.data.partition.natural import train_groups
from fedaug.errors import ConfigError, DatasetError, PartitionError


def _table(path: Path, header: str, rows: list[str]) -> str:
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return str(path)


def _natural(data, num_clients: int, **options: object) -> list[list[int]]:  # type: ignore[no-untyped-def]
    partition = make_partition(
        data.y_train.numpy(),
        name="natural",
        num_classes=data.num_classes,
        seed=0,
        num_clients=num_clients,
        groups=train_groups(data.extras),
        **options,
    )
    return [idx.tolist() for idx in partition.train_indices]


def _sites(tmp_path: Path, rows: list[str]):  # type: ignore[no-untyped-def]
    """A table ``a,site,label`` grouped by site, trained on whole (its own test set)."""
    path = _table(tmp_path / "t.csv", "a,site,label", rows)
    return load_dataset("csv", path=path, test_path=path, group_column="site")


SPEAKERS = ["bob", "al", "cy", "al", "bob", "al", "cy", "bob"]
TABLE = [f"{i}.5,{SPEAKERS[i]},{i % 2},{10 * i}" for i in range(8)]  # columns: a, speaker, label, b


def test_a_csv_group_column_gives_one_client_per_id_and_is_no_feature(tmp_path: Path) -> None:
    # Prepare: the whole table is the training set (the test set is a file of its own)
    path = _table(tmp_path / "t.csv", "a,speaker,label,b", TABLE)
    test = _table(tmp_path / "test.csv", "a,label,b", ["1,0,2", "3,1,4"])  # no speaker column needed
    # Execute
    data = load_dataset("csv", path=path, test_path=test, group_column="speaker", normalize=False)
    # Assert: the speaker is no feature; text ids become clients in sorted order (al, bob, cy)
    assert data.input_shape == (2,) and data.x_train[:, 0].tolist() == [i + 0.5 for i in range(8)]
    assert data.extras["speaker_train"].tolist() == [1, 0, 2, 0, 1, 0, 2, 1]
    assert _natural(data, 3) == [[1, 3, 5], [0, 4, 7], [2, 6]]
    assert "3 groups by 'speaker' (al, bob, cy)" in data.source


def test_integer_ids_are_sorted_as_numbers_and_kept(tmp_path: Path) -> None:
    rows = [f"{i},{[10, 2, 10, 2][i]},{i % 2}" for i in range(4)]
    data = _sites(tmp_path, rows)
    assert data.extras["site_train"].tolist() == [10, 2, 10, 2]  # 2 before 10, not "10" before "2"
    assert _natural(data, 2) == [[1, 3], [0, 2]]


def test_the_group_ids_follow_the_held_out_split(tmp_path: Path) -> None:
    rows = [f"{i},{i % 4},{i % 2}" for i in range(40)]
    data = load_dataset("csv", path=_table(tmp_path / "t.csv", "a,site,label", rows), group_column="site")
    # the feature is the row number, so each training sample says which row, and so which site, it was
    rows_of = (data.x_train[:, 0] * data.std[0] + data.mean[0]).round().long()  # type: ignore[index]
    assert data.extras["site_train"].tolist() == (rows_of % 4).tolist()
    assert data.num_train == 32 and len(_natural(data, 4)) == 4


def test_npz_group_key_beside_x_and_beside_x_train(tmp_path: Path) -> None:
    x = np.arange(24, dtype=np.float32).reshape(12, 2)
    y, sites = np.arange(12) % 3, np.array([5, 7, 9] * 4)
    np.savez(tmp_path / "split.npz", x_train=x, y_train=y, x_test=x[:3], y_test=y[:3], site_train=sites)
    data = load_dataset("arrays", path=str(tmp_path / "split.npz"), group_key="site")
    assert data.input_shape == (2,) and data.extras["site_train"].tolist() == sites.tolist()
    assert _natural(data, 3) == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 11]]
    np.savez(tmp_path / "pair.npz", x=x, y=y, hospital=np.array(["b", "a"] * 6))
    data = load_dataset("arrays", path=str(tmp_path / "pair.npz"), group_key="hospital", test_fraction=0.25)
    rows_of = data.x_train[:, 0].long() // 2
    assert data.extras["hospital_train"].tolist() == ((rows_of + 1) % 2).tolist()  # "a" -> 0, "b" -> 1


@pytest.mark.parametrize(
    ("rows", "options", "message"),
    [
        (TABLE, {"group_column": "spk"}, r"no column 'spk'; columns: a, speaker, label, b"),
        (
            ["1,,0,2", *TABLE],
            {"group_column": "speaker"},
            r"row 2, column 'speaker': the group id cell is empty",
        ),
        (["1,NaN,0,2", *TABLE], {"group_column": "speaker"}, r"row 2, column 'speaker': .* is NaN \('NaN'\)"),
    ],
)
def test_bad_group_columns_are_one_line_errors(
    rows: list[str], options: dict[str, object], message: str, tmp_path: Path
) -> None:
    with pytest.raises(DatasetError, match=message):
        load_dataset("csv", path=_table(tmp_path / "t.csv", "a,speaker,label,b", rows), **options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"group_column": "label"}, r"group_column' .* must be a column other than the label column 'label'"),
        ({"group_column": "b", "features": ["a", "b"]}, r"not among data.features .*, got 'b'"),
        ({"group_column": 3}, r"group_column' .* must be a column name"),
    ],
)
def test_the_group_column_is_neither_the_label_nor_a_feature(
    options: dict[str, object], message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_dataset("csv", path=_table(tmp_path / "t.csv", "a,speaker,label,b", TABLE), **options)


def test_bad_group_keys_are_one_line_errors(tmp_path: Path) -> None:
    x, y = np.zeros((6, 2), np.float32), np.arange(6) % 2
    path = tmp_path / "d.npz"
    np.savez(path, x=x, y=y, site=np.array([1.0, np.nan, 1, 2, 2, 1]), subject=np.arange(5))
    with pytest.raises(DatasetError, match=r"no key 'spk' of group ids .*; it has site, subject, x, y"):
        load_dataset("arrays", path=str(path), group_key="spk")
    with pytest.raises(
        DatasetError, match=r"d\.npz site: group ids must be integers or text, got nan in sample 1"
    ):
        load_dataset("arrays", path=str(path), group_key="site")
    with pytest.raises(
        DatasetError, match=r"d\.npz subject: group ids must be one per sample \(6\), got shape \[5\]"
    ):
        load_dataset("arrays", path=str(path), group_key="subject")
    with pytest.raises(
        ConfigError, match=r"group_key' .* must be the name of the group ids, none of x_train"
    ):
        load_dataset("arrays", path=str(path), group_key="y")
    np.savez(path, x_train=x, y_train=y, x_test=x, y_test=y, site=np.arange(6))
    with pytest.raises(
        DatasetError, match=r"no key 'site_train' of group ids \(group_key='site': 'site_train' beside"
    ):
        load_dataset("arrays", path=str(path), group_key="site")


def test_a_group_whose_samples_all_went_to_the_test_set_is_an_error(tmp_path: Path) -> None:
    rows = [f"{i},{'lone' if i == 0 else ['u', 'v'][i % 2]},{i % 2}" for i in range(10)]
    path = _table(tmp_path / "t.csv", "a,site,label", rows)
    seed = next(s for s in range(100) if 0 in np.random.default_rng(s).permutation(10)[:2])  # row 0 to test
    with pytest.raises(
        DatasetError, match=r"group 'lone' has no training sample \(its 1 sample\(s\) all went"
    ):
        load_dataset("csv", path=path, group_column="site", split_seed=seed)


def test_fewer_groups_than_a_federation_needs_and_a_wrong_k(tmp_path: Path) -> None:
    rows = [f"{i},7,{i % 2}" for i in range(6)]
    data = _sites(tmp_path, rows)
    with pytest.raises(PartitionError, match=r"1 site id \(7\); a federation needs at least two groups"):
        _natural(data, 1)
    data = load_dataset(
        "csv", path=_table(tmp_path / "t.csv", "a,speaker,label,b", TABLE), group_column="speaker"
    )
    with pytest.raises(PartitionError, match=r"3 speaker ids, so set partition.num_clients=3, got 5"):
        _natural(data, 5)


IDS = st.one_of(
    st.lists(st.integers(-5, 40), min_size=4, max_size=40),
    st.lists(st.sampled_from(["ann", "bo", "c 3", "Ann", "12x"]), min_size=4, max_size=40),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=IDS, data=st.data())
def test_every_sample_in_exactly_one_client_one_per_id_labels_untouched(
    ids: list[object], data: st.DataObject, tmp_path: Path
) -> None:
    # Prepare: random labels (both classes present) and ids, written as the training set of an .npz
    labels = np.array(data.draw(st.lists(st.integers(0, 1), min_size=len(ids), max_size=len(ids))))
    labels[:2] = [0, 1]
    distinct = sorted(set(ids), key=lambda v: (isinstance(v, str), v))
    if len(distinct) < 2:
        ids = [*ids[:-1], "zz" if isinstance(ids[0], str) else 41]
        distinct = sorted(set(ids), key=lambda v: (isinstance(v, str), v))
    x = np.arange(len(ids), dtype=np.float32)[:, None].repeat(2, 1)
    path = tmp_path / "p.npz"
    np.savez(path, x_train=x, y_train=labels, x_test=x[:2], y_test=labels[:2], who_train=np.array(ids))
    # Execute
    loaded = load_dataset("arrays", path=str(path), group_key="who")
    clients = _natural(loaded, len(distinct))
    # Assert: a partition of all samples, client k holds exactly the samples of the k-th sorted id
    assert sorted(i for client in clients for i in client) == list(range(len(ids)))
    assert [[ids[i] for i in client] for client in clients] == [[v for v in ids if v == d] for d in distinct]
    assert loaded.y_train.tolist() == labels.tolist()


def test_fedaug_partition_reports_and_plots_a_natural_csv_split(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _table(tmp_path / "t.csv", "a,speaker,label,b", [*TABLE, *TABLE])
    plot = tmp_path / "natural.png"
    argv = [
        "partition",
        "--set",
        "data=csv",
        "--set",
        f"data.path={path}",
        "--set",
        "data.group_column=speaker",
    ]
    argv += ["--set", "partition=natural", "--set", "partition.num_clients=3", "--plot", str(plot)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "clients: 3, samples: 13" in out and plot.stat().st_size > 0
