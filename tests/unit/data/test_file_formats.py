"""Data in common formats, loaded from real files made in tmp_path: ``arrays`` (.npz), ``csv`` and
``image_folder`` (PNGs written with Pillow); each bad input is one DatasetError (or ConfigError) naming it;
every partitioner and ``fedaug partition`` work on them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from fedaug import registry
from fedaug.cli.main import main
from fedaug.data.datasets import load_dataset
from fedaug.data.partition import make_partition
from fedaug.data.sources.files_common import holdout
from fedaug.errors import ConfigError, DatasetError

# --- arrays ---------------------------------------------------------------------------------------------


def _npz(path: Path, **arrays: np.ndarray) -> str:
    np.savez(path, **arrays)
    return str(path)


def _split(n_train: int = 12, n_test: int = 6, shape: tuple[int, ...] = (2, 3)) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x_train": rng.normal(size=(n_train, *shape)).astype(np.float32),
        "y_train": np.arange(n_train) % 3,
        "x_test": rng.normal(size=(n_test, *shape)).astype(np.float32),
        "y_test": np.arange(n_test) % 3,
    }


def test_arrays_loads_its_own_split_unchanged(tmp_path: Path) -> None:
    arrays = _split()
    data = load_dataset(
        "arrays", path=_npz(tmp_path / "d.npz", **arrays, class_names=np.array(["a", "b", "c"]))
    )
    assert torch.equal(data.x_train, torch.from_numpy(arrays["x_train"]))
    assert data.y_test.tolist() == [0, 1, 2, 0, 1, 2]
    assert (data.num_classes, data.class_names, data.input_shape) == (3, ["a", "b", "c"], (2, 3))
    assert (data.modality, data.mean) == ("signal", None)


def test_arrays_normalises_each_channel_with_the_training_set(tmp_path: Path) -> None:
    arrays = _split(shape=(2, 4, 4))
    data = load_dataset("arrays", path=_npz(tmp_path / "d.npz", **arrays), normalize=True)
    assert data.modality == "image"
    channel_mean = arrays["x_train"].mean(axis=(0, 2, 3))
    assert data.mean == pytest.approx(channel_mean.tolist(), rel=1e-5)
    assert data.x_train.mean(dim=(0, 2, 3)).abs().max() < 1e-5
    assert data.x_train.std(dim=(0, 2, 3), unbiased=False) == pytest.approx([1.0, 1.0], rel=1e-4)
    assert torch.allclose(data.denormalize(data.x_test), torch.from_numpy(arrays["x_test"]), atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 200), fraction=st.floats(0.01, 0.99), seed=st.integers(0, 2**16))
def test_holdout_splits_every_sample_once_and_repeats_with_its_seed(
    n: int, fraction: float, seed: int
) -> None:
    x, y = np.arange(n)[:, None], np.arange(n)
    _, y_train, x_test, y_test = holdout(x, y, fraction, seed)
    assert sorted([*y_train.tolist(), *y_test.tolist()]) == list(range(n))
    assert len(y_test) == min(max(1, round(fraction * n)), n - 1)
    assert np.array_equal(x_test[:, 0], y_test)
    assert np.array_equal(holdout(x, y, fraction, seed)[3], y_test)


def test_arrays_holds_out_a_test_fraction_of_one_pair(tmp_path: Path) -> None:
    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    data = load_dataset("arrays", path=_npz(tmp_path / "d.npz", x=x, y=np.arange(20) % 2), test_fraction=0.25)
    assert (data.num_train, data.num_test) == (15, 5)
    assert data.x_train[:, 0].tolist() == [2 * i for i in (data.x_train[:, 1] // 2).long().tolist()]


BAD_ARRAYS = {
    "missing keys": ({"x": np.zeros((4, 2))}, r"d\.npz: no y; it has x \(expected x_train"),
    "lengths": ({"x": np.zeros((4, 2)), "y": np.zeros(3)}, r"x / y: 4 samples of features but 3 labels"),
    "nan": ({"x": np.array([[0.0], [np.nan], [1.0]]), "y": np.arange(3)}, "1 NaN or inf value.*sample 1"),
    "inf": ({"x": np.array([[0.0], [1.0], [np.inf]]), "y": np.arange(3)}, "1 NaN or inf value.*sample 2"),
    "float label": ({"x": np.zeros((3, 1)), "y": np.array([0, 1.5, 1])}, r"integers in \[0, C\), got 1\.5"),
    "negative label": ({"x": np.zeros((3, 1)), "y": np.array([0, -1, 1])}, r"integers in \[0, C\), got -1"),
    "text x": ({"x": np.array([["a"], ["b"]]), "y": np.arange(2)}, "features must be numbers"),
    "no feature axis": ({"x": np.zeros(3), "y": np.arange(3)}, "with a feature axis"),
    "one class": ({"x": np.zeros((3, 1)), "y": np.zeros(3, dtype=int)}, r"at least two classes, got only"),
    "beyond float32": (
        {"x": np.array([[1.0], [1e39]]), "y": np.arange(2)},
        r"feature 0 must be within float32 .*, got 1e\+39 in sample 1",
    ),
    "empty class": (
        {"x": np.zeros((4, 1)), "y": np.array([0, 2, 0, 2])},
        r"class 1 of 3 has no training sample",
    ),
    "test label too big": (
        {
            "x_train": np.zeros((2, 1)),
            "y_train": np.arange(2),
            "x_test": np.zeros((1, 1)),
            "y_test": np.array([2]),
        },
        r"test labels: labels must be integers in \[0, 2\), got 2",
    ),
}


@pytest.mark.parametrize("case", BAD_ARRAYS)
def test_arrays_refuses_bad_files_in_one_line(case: str, tmp_path: Path) -> None:
    arrays, message = BAD_ARRAYS[case]
    with pytest.raises(DatasetError, match=message) as caught:
        load_dataset("arrays", path=_npz(tmp_path / "d.npz", **arrays))
    assert "\n" not in str(caught.value)


def test_arrays_names_a_missing_path_and_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"needs option 'path' of dataset 'arrays': --set data\.path="):
        load_dataset("arrays")
    with pytest.raises(DatasetError, match=r"nope\.npz not found \(looked in the current directory"):
        load_dataset("arrays", path="nope.npz", data_dir=tmp_path)
    (tmp_path / "bad.npz").write_text("not a zip")
    with pytest.raises(DatasetError, match=r"cannot read .*bad\.npz as \.npz"):
        load_dataset("arrays", path="bad.npz", data_dir=tmp_path)  # found in the data dir


# --- image_folder ---------------------------------------------------------------------------------------

COLOURS = {"cat": (255, 0, 0), "dog": (0, 255, 0), "owl": (0, 0, 255)}


def _images(root: Path, per_class: int = 4, size: tuple[int, int] = (8, 6)) -> Path:
    for name, colour in COLOURS.items():
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            Image.new("RGB", size, tuple(c // (i + 1) for c in colour)).save(root / name / f"{i}.png")
    return root


def test_image_folder_decodes_pngs_with_labels_from_the_folder_names(tmp_path: Path) -> None:
    data = load_dataset(
        "image_folder", path=str(_images(tmp_path / "imgs")), normalize=False, test_fraction=0.25
    )
    assert (data.num_train, data.num_test, data.input_shape) == (9, 3, (3, 6, 8))
    assert data.class_names == ["cat", "dog", "owl"]
    for x, y in zip(data.x_train, data.y_train, strict=True):  # each class's colour is in its own channel
        assert x.sum(dim=(1, 2)).argmax() == y and x.max() <= 1.0
    assert data.x_train.max() == 1.0  # 255 / 255


def test_image_folder_uses_train_and_test_folders_resizes_and_normalises(tmp_path: Path) -> None:
    _images(tmp_path / "imgs" / "train", per_class=3, size=(10, 10))
    _images(tmp_path / "imgs" / "test", per_class=1, size=(4, 4))
    data = load_dataset("image_folder", path=str(tmp_path / "imgs"), resize=[5, 7], grayscale=True)
    assert (data.num_train, data.num_test, data.input_shape) == (9, 3, (1, 5, 7))
    assert data.x_train.mean().abs() < 1e-5 and data.mean is not None and len(data.mean) == 1


def test_image_folder_refuses_bad_folders_in_one_line(tmp_path: Path) -> None:
    root = _images(tmp_path / "imgs")
    Image.new("RGB", (9, 9)).save(root / "cat" / "big.png")
    with pytest.raises(
        DatasetError, match=r"images of different sizes: .* is 8x6, .*big\.png 9x9; set data\.resize"
    ):
        load_dataset("image_folder", path=str(root))
    (root / "emu").mkdir()
    with pytest.raises(DatasetError, match=r"class 'emu' has no image"):
        load_dataset("image_folder", path=str(root), resize=[4, 4])
    (root / "emu" / "0.png").write_text("not a png")
    with pytest.raises(DatasetError, match=r"cannot decode .*emu/0\.png as an image"):
        load_dataset("image_folder", path=str(root), resize=[4, 4])
    with pytest.raises(DatasetError, match=r"no class folders"):
        load_dataset("image_folder", path=str(root / "cat"))
    with pytest.raises(
        ConfigError, match=r"option 'resize' of dataset 'image_folder' must be \[height, width\]"
    ):
        load_dataset("image_folder", path=str(root), resize=[4])


def test_image_folder_refuses_a_test_class_it_did_not_train_on(tmp_path: Path) -> None:
    _images(tmp_path / "imgs" / "train")
    (tmp_path / "imgs" / "test" / "yak").mkdir(parents=True)
    Image.new("RGB", (8, 6)).save(tmp_path / "imgs" / "test" / "yak" / "0.png")
    with pytest.raises(DatasetError, match=r"class 'yak' is not a training class \(cat, dog, owl\)"):
        load_dataset("image_folder", path=str(tmp_path / "imgs"))


# --- csv ------------------------------------------------------------------------------------------------


def _csv(path: Path, rows: list[str], header: str = "a,b,label") -> str:
    path.write_text("\n".join([header, *rows]) + "\n")
    return str(path)


def test_csv_reads_features_and_integer_labels_and_standardises(tmp_path: Path) -> None:
    rows = [f"{i},{2 * i},{i % 2}" for i in range(10)]
    data = load_dataset("csv", path=_csv(tmp_path / "t.csv", rows), test_fraction=0.2)
    assert (data.num_train, data.num_test, data.input_shape, data.num_classes) == (8, 2, (2,), 2)
    assert data.x_train.mean(dim=0).abs().max() < 1e-5
    raw = data.denormalize(data.x_train)
    assert torch.allclose(raw[:, 1], 2 * raw[:, 0]) and torch.equal(
        data.y_train, raw[:, 0].round().long() % 2
    )


def test_csv_text_labels_become_sorted_classes_and_a_test_file_shares_them(tmp_path: Path) -> None:
    train = _csv(
        tmp_path / "train.csv", ["1,0,walk", "2,0,run", "3,1,sit", "4,1,walk"], header="a,b,activity"
    )
    test = _csv(tmp_path / "test.csv", ["sit,1,5", "walk,0,6"], header="activity,b,a")
    data = load_dataset("csv", path=train, test_path=test, label="activity", features=["a"], normalize=False)
    assert data.class_names == ["run", "sit", "walk"]
    assert data.y_train.tolist() == [2, 0, 1, 2] and data.y_test.tolist() == [1, 2]
    assert data.x_test[:, 0].tolist() == [5.0, 6.0]


BAD_CSV = {
    "missing column": (["1,2"], "a,b", r"no column 'label'; columns: a, b"),
    "not a number": (["1,x,0", "2,3,1"], "a,b,label", r"row 2, column 'b': 'x' is not a number"),
    "empty cell": (["1,,0", "2,3,1"], "a,b,label", r"1 NaN or inf value\(s\), the first in sample 0"),
    "inf": (["1,2,0", "2,inf,1"], "a,b,label", r"1 NaN or inf value\(s\), the first in sample 1"),
    "short row": (["1,2"], "a,b,label", r"row 2: 2 cells for 3 columns"),
    "float label": (["1,2,0", "2,3,0.5"], "a,b,label", r"integers in \[0, C\), got 0\.5"),
    "empty label cell": (["1,2,0", "2,3,"], "a,b,label", r"row 3, column 'label': the label cell is empty"),
    "duplicate column": (
        ["1,2,0", "2,3,1"],
        "a,a,label",
        r"column name 'a' appears twice \(columns 1 and 2\)",
    ),
    "unnamed column": (["1,2,0", "2,3,1"], "a,,label", r"column 2 of the header has no name"),
    "beyond float32": (
        ["1,2,0", "2,1e300,1"],
        "a,b,label",
        r"column 'b' must be within float32 \(\|value\| <= 3\.403e\+38, the training dtype\), got 1e\+300 in "
        r"sample 1",
    ),
    "one class": (["1,2,0", "2,3,0"], "a,b,label", r"must hold at least two classes, got only class 0"),
    "one named class": (["1,2,walk", "2,3,walk"], "a,b,label", r"got only class 0 \('walk'\)"),
    "empty class": (
        ["1,2,1", "2,3,2", "3,3,1", "4,4,2"],
        "a,b,label",
        r"class 0 of 3 has no training sample",
    ),
}


@pytest.mark.parametrize("case", BAD_CSV)
def test_csv_refuses_bad_tables_in_one_line(case: str, tmp_path: Path) -> None:
    rows, header, message = BAD_CSV[case]
    with pytest.raises(DatasetError, match=message):
        load_dataset("csv", path=_csv(tmp_path / "t.csv", rows, header), test_fraction=0.5)


@pytest.mark.parametrize(
    ("features", "message"),
    [
        (["a", "label"], r"option 'features' of dataset 'csv' must be columns other than the label column "
         r"'label' \(a label leak\), got \['a', 'label'\]"),
        (["a", "a"], r"must be distinct columns \('a' is listed twice\), got \['a', 'a'\]"),
        ("a", r"must be a list of column names, got 'a'"),
    ],
)  # fmt: skip
def test_csv_refuses_the_label_among_the_features(tmp_path: Path, features: object, message: str) -> None:
    path = _csv(tmp_path / "t.csv", ["1,2,0", "2,3,1", "3,4,0", "4,5,1"])
    with pytest.raises(ConfigError, match=message):
        load_dataset("csv", path=path, features=features, test_fraction=0.5)


def test_csv_reads_a_wide_table_in_linear_time(tmp_path: Path) -> None:
    """100k columns: once quadratic (85 s, a list's index() per column), now a dict."""
    n = 100_000
    header = ",".join([*(f"c{i}" for i in range(n)), "label"])
    rows = [",".join(["1"] * n + [str(k % 2)]) for k in range(8)]
    start = time.monotonic()
    data = load_dataset("csv", path=_csv(tmp_path / "wide.csv", rows, header), test_fraction=0.25)
    assert data.input_shape == (n,) and time.monotonic() - start < 20


def test_image_folder_refuses_a_fifo_named_like_an_image_without_blocking(tmp_path: Path) -> None:
    root = _images(tmp_path / "imgs")
    os.mkfifo(root / "cat" / "trap.png")  # opening it to read would wait for a writer forever
    with pytest.raises(DatasetError, match=r"trap\.png is not a regular file \(a FIFO\)"):
        load_dataset("image_folder", path=str(root))


def test_image_folder_refuses_a_decompression_bomb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _images(tmp_path / "imgs")
    Image.new("L", (100, 100)).save(root / "cat" / "bomb.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 6000)  # 10000 pixels: over the limit (Pillow warns)
    with pytest.raises(DatasetError, match=r"bomb\.png: Image size \(10000 pixels\) exceeds limit"):
        load_dataset("image_folder", path=str(root), resize=[4, 4])
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 4000)  # over twice the limit (Pillow raises)
    with pytest.raises(DatasetError, match=r"decompression bombs\); refusing it"):
        load_dataset("image_folder", path=str(root), resize=[4, 4])


# --- partitioners and the partition command -------------------------------------------------------------


@pytest.mark.parametrize("name", registry.available("partitioner"))
def test_every_partitioner_splits_an_arrays_dataset(name: str, tmp_path: Path) -> None:
    x = np.random.default_rng(0).normal(size=(200, 4)).astype(np.float32)
    data = load_dataset("arrays", path=_npz(tmp_path / "d.npz", x=x, y=np.arange(200) % 4))
    options = {
        "dirichlet": {"alpha": 0.5},
        "multimodal": {"num_modes": 2, "classes_per_mode": 2},
        "quantity": {"classes_per_client": 2},
    }.get(name, {})
    groups = {
        "site": np.arange(data.num_train) % 5
    }  # the natural partitioner's group ids; the others ignore them
    partition = make_partition(
        data.y_train.numpy(), name=name, num_classes=4, seed=0, num_clients=5, groups=groups, **options
    )
    indices = np.concatenate(partition.train_indices)
    assert partition.num_clients == 5 and len(set(indices.tolist())) == len(indices) <= data.num_train


def test_fedaug_partition_reads_a_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _csv(tmp_path / "t.csv", [f"{i},{i % 3},{i % 3}" for i in range(60)])
    argv = ["partition", "--set", "data=csv", "--set", f"data.path={path}", "--set", "partition=quantity"]
    assert main([*argv, "--set", "partition.classes_per_client=1", "--set", "partition.num_clients=3"]) == 0
    out = capsys.readouterr().out
    assert "client" in out and out.count("\n") >= 4
