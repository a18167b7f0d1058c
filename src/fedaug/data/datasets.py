""":func:`load_dataset`, the one entry point to every dataset loader (the :class:`Dataset` container, the
:class:`LoadContext` and the option checks live in :mod:`fedaug.data.base`; they are re-exported here).

A loader is a function registered with ``@register("dataset", name)``. It takes a :class:`LoadContext`
(where to look, whether it may download, where to cache) and its dataset-specific options as keyword-only
arguments with defaults; those keyword names *are* the valid options, so :func:`load_dataset` rejects any
other name with a :class:`~fedaug.errors.ConfigError` listing them.

Data directory resolution: the explicit ``data_dir`` argument (CLI ``--data-dir``) wins, then the environment
variable ``FEDAUG_DATA``, then ``~/.cache/fedaug/data``. Inside it the layout is that of the project's offline
copies (``../shared/data``)::

    uci_har/uci_har_inertial.npz                (or "UCI HAR Dataset/" / the official zip)
    mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz
    fashion_mnist/... same names as mnist
    fsdd/fsdd_recordings_26eb9aa.tar.xz         (or fsdd/recordings/*.wav, or a downloaded GitHub archive)
    urbansound8k_mfcc40/{us8k_mfcc40_mean.npz, UrbanSound8K.csv}
    urbansound8k/UrbanSound8K/{audio/fold1..10/*.wav, metadata/UrbanSound8K.csv}
    cifar10/cifar-10-batches-py/                (or cifar10/cifar-10-python.tar.gz)
    cifar10_jpeg_lossy/CIFAR-10-images_*.tar.gz

Processed arrays (decoded JPEGs, spectrograms) are cached under ``cache_dir`` (default
``~/.cache/fedaug/processed``).
"""

from __future__ import annotations

import inspect
import logging
import os
from pathlib import Path
from typing import Any

from fedaug.data.base import (
    DATA_ENV_VAR,
    MODALITIES,
    Dataset,
    LoadContext,
    option_key,
)
from fedaug.errors import ConfigError
from fedaug.registry import available, get
from fedaug.runtime.log_once import info_once

__all__ = [
    "DATA_ENV_VAR",
    "DEFAULT_CACHE_DIR",
    "DEFAULT_DATA_DIR",
    "MODALITIES",
    "Dataset",
    "LoadContext",
    "available_datasets",
    "dataset_options",
    "load_dataset",
    "option_key",
    "resolve_data_dir",
]

logger = logging.getLogger(__name__)

DEFAULT_DATA_DIR = Path("~/.cache/fedaug/data")
DEFAULT_CACHE_DIR = Path("~/.cache/fedaug/processed")


def resolve_data_dir(data_dir: str | Path | None = None) -> tuple[Path, str]:
    """The data directory and where it came from: argument > ``$FEDAUG_DATA`` > ``~/.cache/fedaug/data``."""
    if data_dir is not None:
        return Path(data_dir).expanduser(), "the data_dir argument"
    env = os.environ.get(DATA_ENV_VAR)
    if env:
        return Path(env).expanduser(), f"${DATA_ENV_VAR}"
    return DEFAULT_DATA_DIR.expanduser(), "the default location"


def dataset_options(name: str) -> dict[str, Any]:
    """The options a dataset accepts, with their defaults (raises RegistryError for an unknown name)."""
    loader = get("dataset", name)
    params = inspect.signature(loader).parameters.values()
    return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def available_datasets() -> list[str]:
    """Sorted names of all registered datasets."""
    return available("dataset")


def load_dataset(
    name: str,
    *,
    data_dir: str | Path | None = None,
    download: bool = False,
    cache_dir: Path | None = None,
    **options: Any,
) -> Dataset:
    """Loads a registered dataset.

    Args:
        name: registry name (see :func:`available_datasets`).
        data_dir: root of the data layout; defaults to ``$FEDAUG_DATA`` then ``~/.cache/fedaug/data``.
        download: fetch missing files from the official URLs (checksum-verified, written atomically).
        cache_dir: where processed arrays are cached (default ``~/.cache/fedaug/processed``).
        **options: dataset-specific options (see :func:`dataset_options`).

    Returns:
        The loaded :class:`Dataset`.

    Raises:
        RegistryError: unknown dataset name (the message lists the valid ones).
        ConfigError: unknown option name or invalid option value.
        DatasetError: missing or corrupt files.
    """
    valid = dataset_options(name)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for dataset {name!r}; "
            f"valid options: {', '.join(valid) or '(none)'}"
        )
    root, origin = resolve_data_dir(data_dir)
    cache = (Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE_DIR).expanduser()
    ctx = LoadContext(name=name, data_dir=root, data_dir_origin=origin, download=download, cache_dir=cache)
    loader = get("dataset", name)
    dataset = loader(ctx, **options)
    if not isinstance(dataset, Dataset):  # a plugin's loader: refused before any run dir is written
        from fedaug import plugins

        raise plugins.PluginError(
            f"dataset {name!r} ({plugins.origin(loader)}) returned {type(dataset).__name__}, "
            "expected a fedaug.data.base.Dataset"
        )
    info_once(logger, "loaded %s", dataset.summary())
    return dataset
