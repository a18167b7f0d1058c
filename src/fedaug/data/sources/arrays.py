"""``arrays``: your own data in an ``.npz`` file, no code needed.

The file holds ``x_train``, ``y_train``, ``x_test``, ``y_test`` (a split of your own), or one pair ``x``,
``y`` of which a random ``test_fraction`` is held out (from ``split_seed``). ``x`` arrays are
``[samples, ...]`` of numbers (``[N, C, H, W]`` images, ``[N, F]`` features, ``[N, C, T]`` signals), ``y`` one
integer label in ``[0, C)`` per sample; an optional ``class_names`` array names the classes, an optional
array of group ids (``group_key``: who made each sample, a subject, a speaker, a site) lets
``partition.name=natural`` make one client per id (:mod:`fedaug.data.sources.file_groups`). Checked, each
with a one-line error: missing keys, mismatched lengths, NaN or inf, labels that are not integers in
``[0, C)``, a class without a training sample. ``normalize: true`` standardises each channel (or feature) with
the training set's mean and std. ``--set data=arrays --set data.path=my.npz``.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from fedaug.data.base import MODALITIES, Dataset, LoadContext, option_key
from fedaug.data.partition.natural import GROUP_SUFFIX
from fedaug.data.sources.file_groups import (
    describe_groups,
    group_extras,
    group_ids,
    training_groups,
)
from fedaug.data.sources.files_common import (
    check_features,
    check_labels,
    check_lengths,
    check_split_options,
    holdout_described,
    holdout_indices,
    locate,
    make_dataset,
)
from fedaug.errors import DatasetError
from fedaug.registry import register
from fedaug.validation import check_choice, invalid

SPLIT_KEYS = ("x_train", "y_train", "x_test", "y_test")
PAIR_KEYS = ("x", "y")


def _read(ctx: LoadContext, path: str) -> tuple[dict[str, np.ndarray], str]:
    file = locate(ctx, path, "my_data.npz")
    try:
        loaded = np.load(file, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):  # a single .npy array
            raise ValueError("one array, not an archive of named arrays (np.savez writes those)")
        with loaded as npz:
            return {key: npz[key] for key in npz.files}, str(file)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        reason = str(exc) or type(exc).__name__
        raise DatasetError(f"dataset {ctx.name!r}: cannot read {file} as .npz ({reason})") from None


@register(
    "dataset",
    "arrays",
    shape="yours",
    size="yours",
    classes="yours",
    source="your .npz (x_train, y_train, x_test, y_test)",
    license="yours",
)
def arrays(
    ctx: LoadContext,
    *,
    path: str = "",
    test_fraction: float = 0.2,
    split_seed: int = 0,
    num_classes: int | None = None,
    normalize: bool = False,
    modality: str = "auto",
    group_key: str = "",
) -> Dataset:
    """Loads an ``.npz`` of arrays (see the module docstring).

    Args:
        ctx: where to look (``path`` relative to the current directory, else to the data dir).
        path: the ``.npz`` file.
        test_fraction: share of ``x``/``y`` held out as the test set (ignored with ``x_test``/``y_test``).
        split_seed: seed of that held-out split.
        num_classes: C (default: the largest training label + 1, or the number of ``class_names``).
        normalize: standardise with the training set's per-channel mean and std.
        modality: ``image``, ``signal`` or ``audio``; ``auto``: ``image`` for ``[N, C, H, W]``, else
            ``signal`` (AugMix's image operations need ``image``).
        group_key: the group ids (a subject, a speaker, a site per sample) for ``partition.name=natural``
            (one client per id): key ``<group_key>`` beside ``x``, ``<group_key>_train`` beside ``x_train``.
            Empty (default): no groups.
    """
    check_split_options(ctx.name, test_fraction, split_seed)
    check_choice(option_key(ctx.name, "modality"), modality, ("auto", *MODALITIES))
    _check_group_key(ctx.name, group_key)
    data, file = _read(ctx, path)
    keys = SPLIT_KEYS if all(k in data for k in SPLIT_KEYS) else PAIR_KEYS
    missing = [k for k in keys if k not in data]
    if missing:
        raise DatasetError(
            f"{file}: no {', '.join(missing)}; it has {', '.join(sorted(data)) or 'nothing'} "
            f"(expected {', '.join(SPLIT_KEYS)}, or {', '.join(PAIR_KEYS)} and a held-out test_fraction)"
        )
    checked = []
    for x_key, y_key in zip(keys[::2], keys[1::2], strict=True):
        check_lengths(f"{file} {x_key} / {y_key}", data[x_key], data[y_key])
        x = check_features(f"{file} {x_key}", data[x_key])
        checked.append((x, check_labels(f"{file} {y_key}", data[y_key])))
    ids, id_names, where = _groups(data, file, group_key, split_layout=keys == SPLIT_KEYS)
    if keys == SPLIT_KEYS:
        split = (checked[0][0], checked[0][1], checked[1][0], checked[1][1])
        how = "its own train/test split"
    else:
        split, how = holdout_described(*checked[0], test_fraction, split_seed)
        train, _ = holdout_indices(len(checked[0][1]), test_fraction, split_seed)
        ids = training_groups(where, ids, id_names, train, how)
    names = [str(n) for n in data["class_names"].tolist()] if "class_names" in data else []
    kind = modality if modality != "auto" else ("image" if split[0].ndim == 4 else "signal")
    return make_dataset(
        ctx.name,
        split,
        class_names=names,
        num_classes=num_classes,
        normalize=normalize,
        modality=kind,
        source=f"{file}, {how}" + describe_groups(group_key, ids, id_names),
        files=[Path(file)],
        extras=group_extras(group_key, ids),
    )


def _check_group_key(name: str, group_key: object) -> None:
    """``group_key`` a key name that is none of the data's own keys."""
    key = option_key(name, "group_key")
    if not isinstance(group_key, str):
        raise invalid(key, "the name of a key of the .npz (or empty: no groups)", group_key)
    taken = (*SPLIT_KEYS, *PAIR_KEYS, "class_names")
    if group_key in taken:
        raise invalid(key, f"the name of the group ids, none of {', '.join(taken)}", group_key)


def _groups(
    data: dict[str, np.ndarray], file: str, group_key: str, *, split_layout: bool
) -> tuple[np.ndarray, list[str], str]:
    """The group ids of ``x`` (or ``x_train``), the text ids they stand for, and where they were read."""
    x_key = "x_train" if split_layout else "x"
    num_samples = len(data[x_key])
    if not group_key:
        return np.zeros(num_samples, dtype=np.int64), [], ""
    key = f"{group_key}{GROUP_SUFFIX}" if split_layout else group_key
    if key not in data:
        raise DatasetError(
            f"{file}: no key {key!r} of group ids (group_key={group_key!r}: {key!r} beside {x_key!r}); "
            f"it has {', '.join(sorted(data))}"
        )
    where = f"{file} {key}"
    ids, names = group_ids(where, data[key], num_samples)
    return ids, names, where
