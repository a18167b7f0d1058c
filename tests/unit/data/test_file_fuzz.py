"""Users' own files (``arrays`` .npz, ``csv``, ``image_folder``) fuzzed: whatever a file holds, loading it
gives a dataset or one FedaugError (a clear line), never another exception. Found so far: a 0-d array
(``len()`` of an unsized object), an empty file (numpy's EOFError), a plain ``.npy`` under an ``.npz`` name
and a huge label (a MemoryError); then (#68) a one-class table loaded and trained, a FIFO named like an image
blocked the loader and an image past Pillow's pixel limit ended in its DecompressionBombError."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from fedaug.data.datasets import load_dataset
from fedaug.errors import DatasetError, FedaugError

ARRAYS = st.one_of(
    st.lists(st.integers(-2, 4), max_size=6).map(np.array),
    st.lists(st.floats(allow_nan=True, width=32), max_size=6).map(lambda v: np.array(v, dtype=np.float32)),
    st.integers(0, 4).map(lambda n: np.zeros((n, 2, 2))),
    st.sampled_from([np.array(["a", "b"]), np.zeros((0,)), np.array(3)]),
)
KEYS = st.sampled_from(["x_train", "y_train", "x_test", "y_test", "x", "y", "class_names"])
CELLS = st.one_of(
    st.integers(-3, 5).map(str),
    st.floats(allow_nan=True).map(str),
    st.text('abc ,"\n\t;', max_size=3),
    st.just(""),
)


def _load(name: str, path: Path, **options: object) -> None:
    try:
        load_dataset(name, path=str(path), **options)
    except FedaugError as error:
        assert "\n" not in str(error).strip()


@settings(max_examples=120, deadline=None)
@given(
    content=st.dictionaries(KEYS, ARRAYS, max_size=5),
    fraction=st.sampled_from([None, 0.5]),
    normalize=st.booleans(),
)
def test_any_npz_loads_or_is_refused(
    content: dict[str, np.ndarray], fraction: float | None, normalize: bool
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "d.npz"
        np.savez(path, **content)  # type: ignore[arg-type]
        split = {} if fraction is None else {"test_fraction": fraction}
        _load("arrays", path, normalize=normalize, **split)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_as_npz_are_refused_in_one_line(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "d.npz"
        path.write_bytes(content)
        _load("arrays", path)


@settings(max_examples=150, deadline=None)
@given(
    header=st.lists(st.text("abcl", max_size=3), max_size=4),
    rows=st.lists(st.lists(CELLS, max_size=4), max_size=6),
    label=st.sampled_from(["label", "a", "zz"]),
    fraction=st.sampled_from([0.5, 0.0, 1.0]),
)
def test_any_csv_loads_or_is_refused(
    header: list[str], rows: list[list[str]], label: str, fraction: float
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.csv"
        path.write_text("\n".join([",".join(header)] + [",".join(r) for r in rows]) + "\n")
        _load("csv", path, label=label, test_fraction=fraction)


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (lambda p: np.savez(p, x=np.array(3), y=np.array([0, 1])), "the features are a single value"),
        (lambda p: p.write_bytes(b""), "cannot read"),
        (lambda p: np.save(p, np.zeros(3)), "one array, not an archive of named arrays"),
        # a stray huge label: once a count-sized bincount (27.5 GiB), now the first class without a sample
        (
            lambda p: np.savez(p, x=np.zeros((2, 2)), y=np.array([0, 3693391360])),
            "of 3693391361 has no training sample",
        ),
    ],
)
def test_the_files_the_fuzzer_found_are_refused_by_name(tmp_path: Path, write: object, message: str) -> None:
    path = tmp_path / "d.npz"
    write(path)  # type: ignore[operator]
    if not path.exists():  # np.save appends .npy
        tmp_path.joinpath("d.npz.npy").rename(path)
    with pytest.raises(DatasetError, match=message):
        load_dataset("arrays", path=str(path))


TABLE_CELLS = st.one_of(
    st.integers(-1, 3).map(str),
    st.sampled_from(["", " ", "1e300", "-1e39", "3.4e38", "nan", "walk", "run"]),
)


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_a_csv_that_loads_is_one_the_model_can_learn_from(data: st.DataObject) -> None:
    _csv_property(data)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None)
@given(data=st.data())
def test_a_csv_that_loads_is_one_the_model_can_learn_from_long(data: st.DataObject) -> None:
    _csv_property(data)


def _csv_property(data: st.DataObject) -> None:
    """Repeated, unnamed and label columns, empty labels, values beyond float32, one class: what loads has
    distinct feature columns other than the label, finite float32 values and at least two classes."""
    header = data.draw(st.lists(st.sampled_from(["a", "b", "label", ""]), min_size=2, max_size=4), "header")
    labels = st.sampled_from(["0", "1", "", "walk"])
    rows = data.draw(
        st.lists(
            st.tuples(*(labels if h == "label" else TABLE_CELLS for h in header)), min_size=4, max_size=8
        ),
        "rows",
    )
    features = data.draw(st.none() | st.lists(st.sampled_from(["a", "b", "label"]), max_size=3), "features")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.csv"
        path.write_text("\n".join([",".join(header)] + [",".join(r) for r in rows]) + "\n")
        options: dict[str, object] = {"test_fraction": 0.25}
        if features is not None:
            options["features"] = features
        try:
            dataset = load_dataset("csv", path=str(path), **options)
        except FedaugError as error:
            assert "\n" not in str(error).strip()
            return
    columns = features if features is not None else [h for h in header if h != "label"]
    assert len(set(header)) == len(header) and "" not in header and "label" not in columns
    assert len(set(columns)) == len(columns) and dataset.input_shape == (len(columns),)
    assert dataset.num_classes >= 2 and "" not in dataset.class_names
    assert bool(torch.isfinite(dataset.x_train).all()) and bool(torch.isfinite(dataset.x_test).all())


ENTRIES = st.sampled_from(["png", "png", "other size", "garbage", "fifo", "folder", "dangling link", "bomb"])


def _entry(path: Path, kind: str) -> None:
    if kind in ("png", "other size", "bomb"):
        size = {"png": (6, 4), "other size": (5, 5), "bomb": (80, 80)}[kind]
        Image.new("RGB", size, (200, 10, 10)).save(path)
    elif kind == "garbage":
        path.write_bytes(b"\x89PNG not really")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to(path.parent / "nowhere.png")


def _image_folder_property(data: st.DataObject) -> None:
    """Class folders of images, images of other sizes, garbage, FIFOs, folders and dangling links named like
    images, images past Pillow's pixel limit: loading returns a dataset or one FedaugError, within seconds
    (a FIFO opened for reading would block until the alarm)."""
    classes = data.draw(
        st.lists(st.lists(ENTRIES, min_size=1, max_size=3), min_size=1, max_size=3), label="classes"
    )
    resize = data.draw(st.sampled_from([None, [4, 4]]), label="resize")
    with tempfile.TemporaryDirectory() as folder_name, mock.patch.object(Image, "MAX_IMAGE_PIXELS", 2000):
        root = Path(folder_name)
        for c, entries in enumerate(classes):
            (root / f"c{c}").mkdir()
            for i, kind in enumerate(entries):
                _entry(root / f"c{c}" / f"{i}.png", kind)
        previous = signal.signal(signal.SIGALRM, _blocked)
        signal.alarm(20)
        try:
            load_dataset("image_folder", path=str(root), resize=resize, test_fraction=0.5)
        except FedaugError as error:
            assert "\n" not in str(error).strip()
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)


def _blocked(signum: int, frame: object) -> None:
    raise AssertionError("loading the image folder blocked for 20 s")


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_any_image_folder_loads_or_is_refused_without_blocking(data: st.DataObject) -> None:
    _image_folder_property(data)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(data=st.data())
def test_any_image_folder_loads_or_is_refused_without_blocking_long(data: st.DataObject) -> None:
    _image_folder_property(data)
