"""Decoder for the lossy JPEG copy of CIFAR-10 (``CIFAR-10-images_*.tar.gz``), used by ``cifar10`` variant
``jpeg_lossy``.

Archive layout: ``CIFAR-10-images/{train,test}/<class>/NNNN.jpg``, 32x32 RGB JPEGs at quality 75 with 4:2:0
chroma subsampling, 5000 train / 1000 test images per class. The pixels differ from the original CIFAR-10, so
accuracies on this copy are not comparable with published ones: reports label its runs "CIFAR-10 (JPEG q75
copy)" (:mod:`fedaug.results.stand_ins`), and the shift against the official data was not measured.

Decoding 60000 JPEGs takes a while, so the decoded uint8 arrays (``[N, 32, 32, 3]`` images, ``[N]`` labels,
ordered by class then file name) are cached as ``.npy`` under ``cache_dir`` keyed by the archive's name, size
and modification time.
"""

from __future__ import annotations

import io
import logging
import tarfile
import zlib
from pathlib import Path, PurePosixPath

import numpy as np

from fedaug.data.cache import load_or_build
from fedaug.errors import DatasetError

logger = logging.getLogger(__name__)

JPEG_GLOB = "CIFAR-10-images_*.tar.gz"
Arrays = dict[str, np.ndarray]


def _member_key(name: str, class_names: list[str]) -> tuple[str, int, str] | None:
    """``(split, class_index, file_name)`` for an image member, None for anything else."""
    parts = PurePosixPath(name).parts
    if len(parts) < 3 or not parts[-1].lower().endswith(".jpg"):
        return None
    split, class_name = parts[-3], parts[-2]
    if split not in ("train", "test") or class_name not in class_names:
        return None
    return split, class_names.index(class_name), parts[-1]


def decode_jpeg_archive(archive: Path, class_names: list[str], *, limit: int | None = None) -> Arrays:
    """Decodes the JPEG archive into uint8 arrays ``x_train/y_train/x_test/y_test``.

    Args:
        archive: the ``CIFAR-10-images_*.tar.gz`` file.
        class_names: the 10 class folder names, in label order.
        limit: decode only the first ``limit`` images met in the archive (for quick checks).

    Raises:
        DatasetError: the archive or an image in it is unreadable (the message names it).
    """
    found: dict[str, list[tuple[int, str, np.ndarray]]] = {"train": [], "test": []}
    try:
        with tarfile.open(archive, "r:*") as tf:
            for member in tf:
                key = _member_key(member.name, class_names) if member.isfile() else None
                if key is None:
                    continue
                data = tf.extractfile(member).read()  # type: ignore[union-attr]
                found[key[0]].append((key[1], key[2], _decode(data, f"{archive}:{member.name}")))
                if limit is not None and sum(map(len, found.values())) >= limit:
                    break
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"cannot read CIFAR-10 JPEG archive {archive}: {exc}") from exc
    arrays: Arrays = {}
    for split, items in found.items():
        items.sort(key=lambda item: (item[0], item[1]))
        arrays[f"x_{split}"] = (
            np.stack([img for _, _, img in items]) if items else np.zeros((0, 32, 32, 3), np.uint8)
        )
        arrays[f"y_{split}"] = np.array([label for label, _, _ in items], dtype=np.uint8)
    return arrays


def _decode(data: bytes, name: str) -> np.ndarray:
    from PIL import Image  # here, not at import: every run imports the dataset registry, few decode JPEGs

    try:
        with Image.open(io.BytesIO(data)) as image:
            pixels = np.asarray(image.convert("RGB"), dtype=np.uint8)
    except OSError as exc:  # PIL's UnidentifiedImageError is an OSError
        raise DatasetError(f"cannot decode JPEG {name}: {exc}") from exc
    if pixels.shape != (32, 32, 3):
        raise DatasetError(f"JPEG {name} has shape {pixels.shape}, expected (32, 32, 3)")
    return pixels


def load_jpeg_arrays(archive: Path, class_names: list[str], cache_dir: Path) -> Arrays:
    """Decoded arrays of the whole archive, from the cache when the archive is unchanged."""
    logger.warning(
        "CIFAR-10 variant jpeg_lossy: %s is a LOSSY JPEG re-encoding; accuracies are not comparable "
        "with published CIFAR-10 results",
        archive,
    )

    def build() -> Arrays:
        logger.info("decoding CIFAR-10 JPEGs from %s (first load only; the result is cached)", archive)
        arrays = decode_jpeg_archive(archive, class_names)
        if len(arrays["y_train"]) != 50000 or len(arrays["y_test"]) != 10000:
            logger.warning(
                "%s holds %d train / %d test images, expected 50000 / 10000",
                archive,
                len(arrays["y_train"]),
                len(arrays["y_test"]),
            )
        return arrays

    return load_or_build(
        cache_dir,
        "cifar10_jpeg_lossy",
        params={"decoder": "pillow-rgb-uint8", "version": 1},
        sources=[archive],
        build=build,
    )
