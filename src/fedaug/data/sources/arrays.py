"""``arrays``: your own data in an ``.npz`` file, no code needed.

The file holds ``x_train``, ``y_train``, ``x_test``, ``y_test`` (a split of your own), or one pair ``x``,
``y`` of which a random ``test_fraction`` is held out (from ``split_seed``). ``x`` arrays are
``[samples, ...]`` of numbers (``[N, C, H, W]`` images, ``[N, F]`` features, ``[N, C, T]`` signals), ``y`` one
integer label in ``[0, C)`` per sample; an optional ``class_names`` array names the classes. Checked, each
with a one-line error: missing keys, mismatched lengths, NaN or inf, labels that are not integers in
``[0, C)``, a class without a training sample. ``normalize: true`` standardises each channel (or feature) with
the training set's mean and std. ``--set data=arrays --set data.path=my.npz``.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from fedaug.data.base import MODALITIES, Dataset, LoadContext, option_key
from fedaug.data.sources.files_common import (
    check_features,
    check_labels,
    check_lengths,
    check_split_options,
    holdout_described,
    locate,
    make_dataset,
)
from fedaug.errors import DatasetError
from fedaug.registry import register
from fedaug.validation import check_choice

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
    """
    check_split_options(ctx.name, test_fraction, split_seed)
    check_choice(option_key(ctx.name, "modality"), modality, ("auto", *MODALITIES))
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
    if keys == SPLIT_KEYS:
        split = (checked[0][0], checked[0][1], checked[1][0], checked[1][1])
        how = "its own train/test split"
    else:
        split, how = holdout_described(*checked[0], test_fraction, split_seed)
    names = [str(n) for n in data["class_names"].tolist()] if "class_names" in data else []
    kind = modality if modality != "auto" else ("image" if split[0].ndim == 4 else "signal")
    return make_dataset(
        ctx.name,
        split,
        class_names=names,
        num_classes=num_classes,
        normalize=normalize,
        modality=kind,
        source=f"{file}, {how}",
        files=[Path(file)],
    )
