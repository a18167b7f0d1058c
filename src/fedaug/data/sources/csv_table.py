"""``csv``: a table of your own, no code needed: feature columns and a label column.

``path`` is a CSV file with a header row; ``label`` names the label column (default ``label``), ``features``
the feature columns (default: all others). Labels are integers in ``[0, C)`` or class names (any text:
sorted, they become classes 0..C-1). A test set comes from ``test_path`` (same columns) or is a random
``test_fraction`` of ``path`` (from ``split_seed``). Features are standardised with the training set's mean
and std (``normalize``). Checked before anything is written, each with a one-line error naming the file, row
and column: a missing, unnamed or repeated column, the label column among ``features`` (a label leak), a
cell that is not a number, NaN or inf, a value beyond float32 (the training dtype), an empty label cell, bad
labels, fewer than two classes, a class without a training sample. Reading is linear in the file's size.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from pathlib import Path

import numpy as np

from fedaug.data.base import Dataset, LoadContext, option_key
from fedaug.data.sources.files_common import (
    check_features,
    check_labels,
    check_split_options,
    holdout_described,
    locate,
    make_dataset,
)
from fedaug.errors import DatasetError
from fedaug.registry import register
from fedaug.validation import invalid


def _read(file: Path, label: str, features: list[str] | None) -> tuple[list[str], np.ndarray, list[str]]:
    """The feature columns, the feature matrix and the raw label of every row of ``file``."""
    try:
        with file.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DatasetError(f"cannot read {file} as CSV ({exc})") from None
    if len(rows) < 2:
        raise DatasetError(f"{file}: expected a header row and at least one data row")
    header = [h.strip() for h in rows[0]]
    position: dict[str, int] = {}  # column name -> its index (a dict: linear in the number of columns)
    for i, name in enumerate(header):
        if not name:
            raise DatasetError(f"{file}: column {i + 1} of the header has no name; name every column")
        if name in position:
            raise DatasetError(
                f"{file}: column name {name!r} appears twice (columns {position[name] + 1} and {i + 1}); "
                "column names must differ"
            )
        position[name] = i
    columns = features if features is not None else [h for h in header if h != label]
    missing = [c for c in [label, *columns] if c not in position]
    if missing:
        raise DatasetError(f"{file}: no column {', '.join(map(repr, missing))}; columns: {', '.join(header)}")
    index = [position[c] for c in columns]
    at_label = position[label]
    x = np.empty((len(rows) - 1, len(columns)), dtype=np.float64)
    labels = []
    for r, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise DatasetError(f"{file} row {r}: {len(row)} cells for {len(header)} columns")
        for j, i in enumerate(index):
            try:
                x[r - 2, j] = float(row[i]) if row[i].strip() else math.nan
            except ValueError:
                raise DatasetError(
                    f"{file} row {r}, column {columns[j]!r}: {row[i]!r} is not a number"
                ) from None
        value = row[at_label].strip()
        if not value:
            raise DatasetError(
                f"{file} row {r}, column {label!r}: the label cell is empty; every row needs one"
            )
        labels.append(value)
    return columns, x, labels


def _check_features_option(name: str, label: str, features: object) -> None:
    """``features`` (None: every column but the label) a list of distinct column names without the label
    column: a label among the features would leak the answer into the input."""
    if features is None:
        return
    key = option_key(name, "features")
    if not isinstance(features, list) or not all(isinstance(f, str) and f.strip() for f in features):
        raise invalid(key, "a list of column names", features)
    if label in features:
        raise invalid(key, f"columns other than the label column {label!r} (a label leak)", features)
    repeated = sorted(f for f, n in Counter(features).items() if n > 1)
    if repeated:
        raise invalid(key, f"distinct columns ({repeated[0]!r} is listed twice)", features)


def _encode(file: Path, labels: list[str], names: list[str] | None) -> tuple[np.ndarray, list[str]]:
    """Labels as integers and the class names (empty for integer labels; names sorted for text ones)."""
    try:
        values = np.array([float(v) for v in labels])
    except ValueError:
        values = None
    if names is None and values is not None:
        return check_labels(f"{file} labels", values), []
    names = names if names is not None else sorted(set(labels))
    unknown = sorted(set(labels) - set(names))
    if unknown:
        raise DatasetError(
            f"{file}: label {unknown[0]!r} is not a class of the training file ({', '.join(names)})"
        )
    return np.array([names.index(v) for v in labels], dtype=np.int64), names


@register(
    "dataset",
    "csv",
    shape="[features]",
    size="yours",
    classes="yours",
    source="your CSV table (feature + label columns)",
    license="yours",
)
def csv_table(
    ctx: LoadContext,
    *,
    path: str = "",
    label: str = "label",
    features: list[str] | None = None,
    test_path: str = "",
    test_fraction: float = 0.2,
    split_seed: int = 0,
    num_classes: int | None = None,
    normalize: bool = True,
) -> Dataset:
    """Loads a CSV table (see the module docstring).

    Args:
        ctx: where to look (paths relative to the current directory, else to the data dir).
        path: the training CSV (or the whole table, with ``test_fraction``).
        label: the label column.
        features: the feature columns (default: every column but ``label``).
        test_path: a test CSV with the same columns (default: hold out ``test_fraction`` of ``path``).
        test_fraction: share of ``path`` held out when there is no ``test_path``.
        split_seed: seed of that held-out split.
        num_classes: C (default: the largest label + 1, or the number of class names).
        normalize: standardise each feature with the training set's mean and std.
    """
    check_split_options(ctx.name, test_fraction, split_seed)
    _check_features_option(ctx.name, label, features)
    file = locate(ctx, path, "my_table.csv")
    columns, x, raw = _read(file, label, features)
    if not columns:
        raise DatasetError(f"{file}: no feature column besides the label column {label!r}")
    y, names = _encode(file, raw, None)
    x = check_features(str(file), x, columns)
    if test_path:
        test_file = locate(ctx, test_path, "my_test.csv")
        _, x_test, raw_test = _read(test_file, label, columns)
        y_test, _ = _encode(test_file, raw_test, names or None)
        split = (x, y, check_features(str(test_file), x_test, columns), y_test)
        how, files = f"test set {test_file}", [file, test_file]
    else:
        (split, how), files = holdout_described(x, y, test_fraction, split_seed), [file]
    return make_dataset(
        ctx.name,
        split,
        class_names=names,
        num_classes=num_classes,
        normalize=normalize,
        modality="signal",
        source=f"{file}: {len(columns)} features, label {label!r}, {how}",
        files=files,
    )
