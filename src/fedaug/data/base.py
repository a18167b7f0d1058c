"""The :class:`Dataset` container, the :class:`LoadContext` a loader receives, and the option checks loaders
share: what :mod:`fedaug.data.sources` builds on, below :mod:`fedaug.data.datasets` (which imports the sources
to register them and re-exports these names).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from fedaug.errors import DatasetError

DATA_ENV_VAR = "FEDAUG_DATA"
MODALITIES = ("image", "signal", "audio")


@dataclass(frozen=True)
class Dataset:
    """A fully materialised train/test dataset (tensors in memory, official split unless stated).

    Attributes:
        name: registry name, e.g. ``"uci_har"``.
        x_train: float32 inputs ``[num_train, *input_shape]`` (already normalised if ``mean`` is set).
        y_train: int64 labels in ``0..num_classes-1``.
        x_test: float32 inputs ``[num_test, *input_shape]``.
        y_test: int64 labels.
        num_classes: number of classes.
        class_names: one name per class, index = label.
        input_shape: per-sample shape, e.g. ``(1, 28, 28)``.
        source: human description of what was loaded (files, variant, warnings such as lossy JPEG).
        mean: normalisation mean per entry of axis ``norm_axis`` of a sample; None when not normalised.
        std: normalisation std, same layout as ``mean``; None when not normalised.
        norm_axis: the per-sample axis that ``mean``/``std`` index (0 = channels of ``[C, H, W]``).
        extras: optional per-sample metadata tensors, e.g. ``{"subject_train": ..., "subject_test": ...}``.
        modality: what a sample is, one of :data:`MODALITIES`: ``image`` (and the synthetic blobs),
            ``signal`` (UCI-HAR's windows, ``[1, time, channels]``) or ``audio`` (MFCC frames); methods whose
            operations only make sense on one (AugMix's rotations and shears: images) check it.
        source_files: the user's files it was read from (by the ``arrays``, ``csv`` and ``image_folder``
            loaders): a resumed run compares their SHA-256 with its checkpoint's and warns of a changed one.
    """

    name: str
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    num_classes: int
    class_names: list[str]
    input_shape: tuple[int, ...]
    source: str
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    norm_axis: int = 0
    extras: Mapping[str, Tensor] = field(default_factory=dict)
    modality: str = "image"
    source_files: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        if self.modality not in MODALITIES:
            raise DatasetError(
                f"{self.name}: modality must be one of {', '.join(MODALITIES)}, got {self.modality!r}"
            )
        for split, x, y in (("train", self.x_train, self.y_train), ("test", self.x_test, self.y_test)):
            if x.dtype != torch.float32 or y.dtype != torch.int64:
                raise DatasetError(
                    f"{self.name} {split}: expected float32 x / int64 y, got {x.dtype} / {y.dtype}"
                )
            if x.shape[0] != y.shape[0] or tuple(x.shape[1:]) != tuple(self.input_shape):
                raise DatasetError(
                    f"{self.name} {split}: x {tuple(x.shape)} / y {tuple(y.shape)} do not match "
                    f"input_shape {self.input_shape}"
                )
            if y.numel() and (int(y.min()) < 0 or int(y.max()) >= self.num_classes):
                raise DatasetError(f"{self.name} {split}: labels outside 0..{self.num_classes - 1}")
        if len(self.class_names) != self.num_classes:
            raise DatasetError(
                f"{self.name}: {len(self.class_names)} class names for {self.num_classes} classes"
            )

    @property
    def num_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def num_test(self) -> int:
        return int(self.x_test.shape[0])

    def denormalize(self, x: Tensor) -> Tensor:
        """Undoes the normalisation of a batch ``[B, *input_shape]`` (identity when none was applied)."""
        if self.mean is None or self.std is None:
            return x
        view = [1] * (len(self.input_shape) + 1)
        view[self.norm_axis + 1] = -1
        mean = torch.tensor(self.mean, dtype=x.dtype, device=x.device).view(view)
        std = torch.tensor(self.std, dtype=x.dtype, device=x.device).view(view)
        return x * std + mean

    def summary(self) -> str:
        """One line: name, sizes, shape, classes and source."""
        return (
            f"{self.name}: train {self.num_train}, test {self.num_test}, input {list(self.input_shape)}, "
            f"{self.num_classes} classes; {self.source}"
        )


@dataclass(frozen=True)
class LoadContext:
    """Where a loader looks, whether it may download, and where it caches processed arrays.

    Attributes:
        name: the dataset being loaded (for messages).
        data_dir: resolved data directory (the layout inside is described in this module's docstring).
        data_dir_origin: how ``data_dir`` was chosen, for error messages.
        download: whether missing files may be fetched from the official URLs.
        cache_dir: directory for processed caches.
    """

    name: str
    data_dir: Path
    data_dir_origin: str
    download: bool
    cache_dir: Path

    def missing(self, expected: Iterable[str], looked_in: Sequence[Path], hint: str = "") -> DatasetError:
        """The error for a dataset that is not on disk: files expected, places searched, how to fix it."""
        places = ", ".join(str(p) for p in looked_in)
        message = (
            f"dataset {self.name!r} not found: expected {', '.join(expected)} in {places} "
            f"(data dir {self.data_dir} from {self.data_dir_origin}). Point --data-dir "
            f"(load_dataset(data_dir=...)) or the {DATA_ENV_VAR} environment variable at a folder with "
            "this layout, or let fedaug fetch it: --set data.download=true "
            "(load_dataset(..., download=True))."
        )
        return DatasetError(f"{message} {hint}".strip())


def option_key(dataset: str, option: str) -> str:
    """How errors name a dataset option: ``option 'n_mels' of dataset 'fsdd'`` (the ``key`` of the
    :mod:`fedaug.validation` checks a loader runs on its options)."""
    return f"option {option!r} of dataset {dataset!r}"
