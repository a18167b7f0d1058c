"""What the loaders of data in common formats (``arrays``, ``csv``, ``image_folder``) share: finding the file,
checking features and labels (one-line errors naming the file, the key and the bad value), the held-out
split, the training set's normalisation and the :class:`Dataset` they return.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from fedaug.data.base import Dataset, LoadContext, option_key
from fedaug.errors import ConfigError, DatasetError
from fedaug.validation import check_int, check_number


def locate(ctx: LoadContext, path: str, example: str) -> Path:
    """``path`` as given (absolute, or relative to the current directory), else inside the data directory.

    Raises:
        ConfigError: no path given. DatasetError: nothing there.
    """
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(
            f"dataset {ctx.name!r} needs {option_key(ctx.name, 'path')}: --set data.path={example}"
        )
    given = Path(path).expanduser()
    for candidate in (given, ctx.data_dir / given):
        if candidate.exists():
            return candidate
    raise DatasetError(
        f"dataset {ctx.name!r}: {path} not found (looked in the current directory and in the data dir "
        f"{ctx.data_dir} from {ctx.data_dir_origin})"
    )


def check_split_options(name: str, test_fraction: float, split_seed: int) -> None:
    """``test_fraction`` in (0, 1) and ``split_seed`` >= 0, or ConfigError naming the option."""
    check_number(option_key(name, "test_fraction"), test_fraction, 0, 1, low_open=True, high_open=True)
    check_int(option_key(name, "split_seed"), split_seed, 0)


FLOAT32_MAX = float(np.finfo(np.float32).max)
"""The largest value a feature may hold: features are trained in float32, where a larger one is inf."""


def check_features(where: str, x: np.ndarray, columns: Sequence[str] = ()) -> np.ndarray:
    """``x`` as float32 ``[N, ...]``; DatasetError for non-numbers, no feature axis, NaN/inf, or a value
    beyond float32 (``columns``: the names of a table's feature columns, named in that error)."""
    if x.dtype.kind not in "biuf":
        raise DatasetError(f"{where}: features must be numbers, got dtype {x.dtype}")
    if x.ndim < 2:
        raise DatasetError(
            f"{where}: features must be [samples, ...] with a feature axis, got shape {x.shape}"
        )
    bad = ~np.isfinite(x)
    if bad.any():
        first = int(np.argwhere(bad.reshape(len(x), -1).any(axis=1))[0][0])
        raise DatasetError(f"{where}: {int(bad.sum())} NaN or inf value(s), the first in sample {first}")
    if x.dtype.kind == "f" and x.dtype.itemsize > 4:  # (integers up to 64 bits all fit)
        beyond = np.abs(x.reshape(len(x), -1)) > FLOAT32_MAX
        if beyond.any():
            sample, entry = (int(i) for i in np.argwhere(beyond)[0])
            value = x.reshape(len(x), -1)[sample, entry].item()
            column = f"column {columns[entry]!r}" if entry < len(columns) else f"feature {entry}"
            raise DatasetError(
                f"{where}: {column} must be within float32 (|value| <= {FLOAT32_MAX:.4g}, the training "
                f"dtype), got {value!r} in sample {sample}"
            )
    return x.astype(np.float32)


def check_labels(where: str, y: np.ndarray, num_classes: int | None = None) -> np.ndarray:
    """``y`` as int64 ``[N]``; DatasetError unless its values are integers in ``[0, num_classes)`` (without
    ``num_classes``: >= 0)."""
    if y.ndim != 1:
        raise DatasetError(f"{where}: labels must be one integer per sample, got shape {y.shape}")
    if y.dtype.kind not in "biuf" or (
        y.dtype.kind == "f" and not np.all(np.isfinite(y) & (y == np.round(y)))
    ):
        sample = (
            next((v for v in y.tolist() if not float(v).is_integer()), None) if y.dtype.kind == "f" else y[0]
        )
        raise DatasetError(f"{where}: labels must be integers in [0, C), got {sample!r} (dtype {y.dtype})")
    labels = y.astype(np.int64)
    high = num_classes if num_classes is not None else None
    outside = labels[(labels < 0) | (labels >= high)] if high is not None else labels[labels < 0]
    if outside.size:
        valid = f"[0, {high})" if high is not None else "[0, C)"
        raise DatasetError(f"{where}: labels must be integers in {valid}, got {int(outside[0])}")
    return labels


def check_lengths(where: str, x: np.ndarray, y: np.ndarray) -> None:
    """DatasetError unless ``x`` and ``y`` are arrays (not scalars) holding as many samples."""
    for what, array in (("features", x), ("labels", y)):
        if np.ndim(array) == 0:
            raise DatasetError(f"{where}: the {what} are a single value, not one entry per sample")
    if len(x) != len(y):
        raise DatasetError(f"{where}: {len(x)} samples of features but {len(y)} labels")
    if len(x) == 0:
        raise DatasetError(f"{where}: no samples")


def num_classes_of(
    name: str, y_train: np.ndarray, num_classes: int | None, class_names: Sequence[str]
) -> int:
    """C: ``num_classes``, else the class names' count, else the largest training label + 1. DatasetError for
    a class without a training sample (no client could learn it; the partitioners need every class)."""
    if num_classes is not None:
        check_int(option_key(name, "num_classes"), num_classes, 2)
    count = num_classes or len(class_names) or int(y_train.max()) + 1
    if count < 2:  # one class trains to 100% and learns nothing
        only = f" ({class_names[0]!r})" if class_names else ""
        raise DatasetError(
            f"dataset {name!r}: the training labels must hold at least two classes, got only class 0{only}"
        )
    # the first label in [0, count) without a sample, from the sorted distinct labels (no count-sized array:
    # a stray huge label would ask for gigabytes)
    present = np.unique(y_train)
    gaps = np.flatnonzero(present != np.arange(len(present)))
    label = int(gaps[0]) if gaps.size else len(present)
    if label < count:
        named = f" ({class_names[label]!r})" if label < len(class_names) else ""
        raise DatasetError(f"dataset {name!r}: class {label}{named} of {count} has no training sample")
    return count


def holdout(
    x: np.ndarray, y: np.ndarray, fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A random ``fraction`` of the samples (at least one; from ``seed``) held out as the test set:
    ``x_train, y_train, x_test, y_test``."""
    train, test = holdout_indices(len(y), fraction, seed)
    return x[train], y[train], x[test], y[test]


def holdout_indices(num_samples: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``(train, test)`` sample indices of :func:`holdout` (for what else a sample carries: group ids)."""
    order = np.random.default_rng(seed).permutation(num_samples)
    n_test = min(max(1, round(fraction * num_samples)), num_samples - 1)
    return order[n_test:], order[:n_test]


def holdout_described(
    x: np.ndarray, y: np.ndarray, fraction: float, seed: int
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], str]:
    """:func:`holdout` and how the dataset's ``source`` says so."""
    return holdout(x, y, fraction, seed), f"{fraction:g} held out (seed {seed})"


def normalise(
    x_train: np.ndarray, x_test: np.ndarray
) -> tuple[np.ndarray, np.ndarray, tuple[float, ...], tuple[float, ...]]:
    """Both splits standardised with the training set's mean and std per entry of a sample's first axis
    (channels of ``[C, H, W]``, features of ``[F]``); a constant entry keeps std 1."""
    axes = tuple(i for i in range(x_train.ndim) if i != 1)
    mean = x_train.mean(axis=axes, dtype=np.float64)
    std = x_train.std(axis=axes, dtype=np.float64)
    std[std == 0] = 1.0
    view = (1, -1) + (1,) * (x_train.ndim - 2)
    m, s = mean.reshape(view).astype(np.float32), std.reshape(view).astype(np.float32)
    return (x_train - m) / s, (x_test - m) / s, tuple(mean.tolist()), tuple(std.tolist())


def make_dataset(
    name: str,
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    *,
    class_names: Sequence[str],
    num_classes: int | None,
    normalize: bool,
    modality: str,
    source: str,
    files: Sequence[Path] = (),
    extras: Mapping[str, torch.Tensor] | None = None,
) -> Dataset:
    """The :class:`Dataset` of checked arrays ``x_train, y_train, x_test, y_test`` (read from ``files``;
    ``extras``: per-sample metadata such as the group ids of :mod:`fedaug.data.sources.file_groups`)."""
    x_train, y_train, x_test, y_test = arrays
    if x_train.shape[1:] != x_test.shape[1:]:
        raise DatasetError(
            f"dataset {name!r}: train samples are {list(x_train.shape[1:])} but test samples "
            f"{list(x_test.shape[1:])}"
        )
    count = num_classes_of(name, y_train, num_classes, class_names)
    check_labels(f"dataset {name!r} test labels", y_test, count)
    mean = std = None
    if normalize:
        x_train, x_test, mean, std = normalise(x_train, x_test)
    names = list(class_names) or [str(c) for c in range(count)]
    if len(names) != count:
        raise DatasetError(f"dataset {name!r}: {len(names)} class names for {count} classes")
    return Dataset(
        name=name,
        x_train=torch.from_numpy(np.ascontiguousarray(x_train, dtype=np.float32)),
        y_train=torch.from_numpy(y_train.astype(np.int64)),
        x_test=torch.from_numpy(np.ascontiguousarray(x_test, dtype=np.float32)),
        y_test=torch.from_numpy(y_test.astype(np.int64)),
        num_classes=count,
        class_names=names,
        input_shape=tuple(int(d) for d in x_train.shape[1:]),
        source=source,
        mean=mean,
        std=std,
        modality=modality,
        source_files=tuple(files),
        extras=dict(extras or {}),
    )
