"""Users' own files (``arrays`` .npz, ``csv``) fuzzed: whatever a file holds, loading it gives a dataset or
one FedaugError (a clear line), never another exception. Found so far: a 0-d array (``len()`` of an unsized
object), an empty file (numpy's EOFError), a plain ``.npy`` under an ``.npz`` name and a huge label (a
MemoryError)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
