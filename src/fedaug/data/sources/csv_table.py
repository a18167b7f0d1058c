"""``csv``: a table of your own, no code needed: feature columns and a label column.

``path`` is a CSV file with a header row; ``label`` names the label column (default ``label``), ``features``
the feature columns (default: all others), ``group_column`` an optional column of group ids (who made the
row: a subject, a speaker, a site; never a feature) that ``partition.name=natural`` makes one client each
of (:mod:`fedaug.data.sources.file_groups`). Labels are integers in ``[0, C)`` or class names (any text:
sorted, they become classes 0..C-1). A test set comes from ``test_path`` (same columns) or is a random
``test_fraction`` of ``path`` (from ``split_seed``). Features are standardised with the training set's mean
and std (``normalize``). Checked before anything is written, each with a one-line error naming the file, row
and column: a missing, unnamed or repeated column, the label column among ``features`` (a label leak), a
cell that is not a number, NaN or inf, a value beyond float32 (the training dtype), an empty label cell, bad
labels, fewer than two classes, a class without a training sample, an empty or NaN group id. Reading is
linear in the file's size.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from pathlib import Path

import numpy as np

from fedaug.data.base import Dataset, LoadContext, option_key
from fedaug.data.sources.file_groups import describe_groups, group_extras, group_ids, training_groups
from fedaug.data.sources.files_common import (
    check_features,
    check_labels,
    check_split_options,
    holdout_described,
    holdout_indices,
    locate,
    make_dataset,
)
from fedaug.errors import DatasetError
from fedaug.registry import register
from fedaug.validation import invalid


def _header(file: Path, rows: list[list[str]]) -> tuple[list[str], dict[str, int]]:
    """The header's column names and each one's index (a dict: linear in the number of columns)."""
    if len(rows) < 2:
        raise DatasetError(f"{file}: expected a header row and at least one data row")
    header = [h.strip() for h in rows[0]]
    position: dict[str, int] = {}
    for i, name in enumerate(header):
        if not name:
            raise DatasetError(f"{file}: column {i + 1} of the header has no name; name every column")
        if name in position:
            raise DatasetError(
                f"{file}: column name {name!r} appears twice (columns {position[name] + 1} and {i + 1}); "
                "column names must differ"
            )
        position[name] = i
    return header, position


def _read(
    file: Path, label: str, features: list[str] | None, group: str = ""
) -> tuple[list[str], np.ndarray, list[str], list[str]]:
    """The feature columns, the feature matrix, the raw label and the raw group id (``group``: its column;
    none without) of every row of ``file``."""
    try:
        with file.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DatasetError(f"cannot read {file} as CSV ({exc})") from None
    header, position = _header(file, rows)
    columns = features if features is not None else [h for h in header if h not in (label, group)]
    missing = [c for c in [label, *([group] if group else []), *columns] if c not in position]
    if missing:
        raise DatasetError(f"{file}: no column {', '.join(map(repr, missing))}; columns: {', '.join(header)}")
    index = [position[c] for c in columns]
    x = np.empty((len(rows) - 1, len(columns)), dtype=np.float64)
    labels, groups = [], []
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
        labels.append(_cell(file, r, label, row[position[label]], "label"))
        if group:
            groups.append(_cell(file, r, group, row[position[group]], "group id"))
    return columns, x, labels, groups


def _cell(file: Path, row: int, column: str, value: str, what: str) -> str:
    """A label or group id cell, stripped; DatasetError if it is empty (or, for a group id, NaN)."""
    value = value.strip()
    if not value or (what == "group id" and value.lower() == "nan"):
        shown = "empty" if not value else f"NaN ({value!r})"
        raise DatasetError(
            f"{file} row {row}, column {column!r}: the {what} cell is {shown}; every row needs one"
        )
    return value


def _check_group_option(name: str, label: str, group: object, features: object) -> None:
    """``group_column`` a column name other than the label and not among ``features``: a group id names the
    client a sample belongs to, it is not an input."""
    key = option_key(name, "group_column")
    if not isinstance(group, str):
        raise invalid(key, "a column name (or empty: no groups)", group)
    if group and group == label:
        raise invalid(key, f"a column other than the label column {label!r}", group)
    if group and isinstance(features, list) and group in features:
        raise invalid(key, "a column that is not among data.features (a group id is no feature)", group)


def _check_features_option(name: str, label: str, features: object) -> None:
    """``features`` (None: every column but the label and the group column) a list of distinct column names
    without the label column: a label among the features would leak the answer into the input."""
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


def _groups(where: str, column: str, raw: list[str], num_rows: int) -> tuple[np.ndarray, list[str]]:
    """The rows' checked group ids (:func:`group_ids`); without a group column one id for all."""
    if not column:
        return np.zeros(num_rows, dtype=np.int64), []
    return group_ids(where, np.array(raw, dtype=str), num_rows)


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
    group_column: str = "",
) -> Dataset:
    """Loads a CSV table (see the module docstring).

    Args:
        ctx: where to look (paths relative to the current directory, else to the data dir).
        path: the training CSV (or the whole table, with ``test_fraction``).
        label: the label column.
        features: the feature columns (default: every column but ``label`` and ``group_column``).
        test_path: a test CSV with the same columns (default: hold out ``test_fraction`` of ``path``).
        test_fraction: share of ``path`` held out when there is no ``test_path``.
        split_seed: seed of that held-out split.
        num_classes: C (default: the largest label + 1, or the number of class names).
        normalize: standardise each feature with the training set's mean and std.
        group_column: the column of each row's group id (a subject, a speaker, a site) for
            ``partition.name=natural`` (one client per id); never a feature. Empty (default): no groups.
    """
    check_split_options(ctx.name, test_fraction, split_seed)
    _check_features_option(ctx.name, label, features)
    _check_group_option(ctx.name, label, group_column, features)
    file = locate(ctx, path, "my_table.csv")
    columns, x, raw, raw_groups = _read(file, label, features, group_column)
    if not columns:
        raise DatasetError(f"{file}: no feature column besides the label column {label!r}")
    y, names = _encode(file, raw, None)
    x = check_features(str(file), x, columns)
    where = f"{file} column {group_column!r}"
    ids, id_names = _groups(where, group_column, raw_groups, len(y))
    if test_path:
        test_file = locate(ctx, test_path, "my_test.csv")
        _, x_test, raw_test, _ = _read(test_file, label, columns)
        y_test, _ = _encode(test_file, raw_test, names or None)
        split = (x, y, check_features(str(test_file), x_test, columns), y_test)
        how, files = f"test set {test_file}", [file, test_file]
    else:
        (split, how), files = holdout_described(x, y, test_fraction, split_seed), [file]
        train, _ = holdout_indices(len(y), test_fraction, split_seed)
        ids = training_groups(where, ids, id_names, train, how)
    return make_dataset(
        ctx.name,
        split,
        class_names=names,
        num_classes=num_classes,
        normalize=normalize,
        modality="signal",
        source=f"{file}: {len(columns)} features, label {label!r}, {how}"
        + describe_groups(group_column, ids, id_names),
        files=files,
        extras=group_extras(group_column, ids),
    )
