"""Group ids in a user's own file (a column of a CSV, a key of an ``.npz``), for the ``natural`` partitioner.

A group id says who made a sample (a subject, a speaker, a site, a hospital); ``partition.name=natural`` makes
one client per distinct id. The loaders read the ids, check them here and hand them on as the dataset's
``<name>_train`` extra (what :func:`fedaug.data.partition.natural.train_groups` reads). Ids are integers or
text: integers (also whole-number floats, and text cells that are all integers) are kept as they are, text
ids become their position among the sorted distinct ids, so in both cases the clients follow the sorted ids.
Checked, each with a one-line error naming the file, the column or key and the sample: an empty or NaN id, a
fractional or infinite number, ids not one per sample, and a group whose every sample the held-out test
split took (it would silently be one client less).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fedaug.data.partition.natural import GROUP_SUFFIX
from fedaug.errors import DatasetError


def _text_ids(where: str, ids: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Text ids as int64 (all integers) or as positions among the sorted distinct ids (with those ids)."""
    text = [str(v).strip() for v in ids.tolist()]
    for sample, value in enumerate(text):
        if not value or value.lower() == "nan":
            what = "empty" if not value else f"NaN ({value!r})"
            raise DatasetError(f"{where}: the group id of sample {sample} is {what}; every sample needs one")
    try:
        return np.array([int(v) for v in text], dtype=np.int64), []
    except ValueError:
        names = sorted(set(text))
        position = {name: k for k, name in enumerate(names)}
        return np.array([position[v] for v in text], dtype=np.int64), names


def group_ids(where: str, ids: np.ndarray, num_samples: int) -> tuple[np.ndarray, list[str]]:
    """The checked group id of each of ``num_samples`` samples as int64, and the sorted text ids that the
    integers stand for (empty when the ids are integers themselves).

    Raises:
        DatasetError: ids not one per sample, an empty/NaN/infinite/fractional id, a dtype that is no id.
    """
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.size != num_samples:
        raise DatasetError(
            f"{where}: group ids must be one per sample ({num_samples}), got shape {list(ids.shape)}"
        )
    if ids.dtype.kind in "US":
        return _text_ids(where, ids.astype(str))
    if ids.dtype.kind in "biu":
        return ids.astype(np.int64), []
    if ids.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(ids) | (ids != np.round(ids)))
        if bad.size:
            raise DatasetError(
                f"{where}: group ids must be integers or text, got {ids[bad[0]].item()!r} in sample {bad[0]}"
            )
        return ids.astype(np.int64), []
    raise DatasetError(f"{where}: group ids must be integers or text, got dtype {ids.dtype}")


def training_groups(
    where: str, ids: np.ndarray, names: Sequence[str], train: np.ndarray, how: str
) -> np.ndarray:
    """The ids of the training samples ``train`` (indices into ``ids``); DatasetError for a group that has
    none left (all its samples went to the test set, ``how``)."""
    kept: np.ndarray = np.asarray(ids[train])
    lost = np.setdiff1d(np.unique(ids), kept)
    if lost.size:
        first = int(lost[0])
        name = repr(names[first]) if names else str(first)
        count = int((ids == first).sum())
        raise DatasetError(
            f"{where}: group {name} has no training sample (its {count} sample(s) all went to the test "
            f"set, {how}); give it more samples, a test set of your own, or leave it out"
        )
    return kept


def group_extras(name: str, ids: np.ndarray) -> dict[str, torch.Tensor]:
    """The dataset extra holding the training samples' group ids (``{}`` without a group)."""
    return {f"{name}{GROUP_SUFFIX}": torch.from_numpy(ids.astype(np.int64))} if name else {}


def describe_groups(name: str, ids: np.ndarray, names: Sequence[str]) -> str:
    """How a dataset's ``source`` mentions its groups: ``, 6 groups by 'speaker'`` (empty without)."""
    if not name:
        return ""
    count = len(np.unique(ids))
    shown = f" ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})" if names else ""
    return f", {count} group{'s' if count != 1 else ''} by {name!r}{shown}"
