"""CIFAR-10: 32x32 colour images in 10 classes (A. Krizhevsky, 2009).

Data: classes airplane, automobile, bird, cat, deer, dog, frog, horse, ship, truck; official split 50000
train / 10000 test. Output ``[N, 3, 32, 32]`` float32, scaled to [0, 1] and by default (``normalize=True``)
standardised per channel with mean (0.4914, 0.4822, 0.4465) / std (0.2470, 0.2435, 0.2616).

Variants:
    ``official`` (default): the python pickle batches ``data_batch_1..5`` and ``test_batch``, each a pickled
        dict with ``b"data"`` (uint8 ``[10000, 3072]``, channel-major RGB) and ``b"labels"``. Read from
        ``<data_dir>/cifar10/cifar-10-batches-py/`` or straight from the official ``cifar-10-python.tar.gz``
        in ``<data_dir>/cifar10/``. Every batch is md5-checked against the published checksums *before* it
        is unpickled, so only the genuine files are ever unpickled. ``download=True`` fetches the official
        archive (md5 ``c58f30108f718f92721af3b95e74349a``) from the University of Toronto. A local archive
        is md5-checked once per file version (cached); ``verify=False`` skips it (batches still are checked).
    ``jpeg_lossy``: the JPEG (quality 75) copy ``<data_dir>/cifar10_jpeg_lossy/CIFAR-10-images_*.tar.gz`` (see
        :mod:`fedaug.data.sources.cifar10_jpeg`). LOSSY: ``source`` says so, and reports label its runs
        "CIFAR-10 (JPEG q75 copy)" (:mod:`fedaug.results.stand_ins`), never plain CIFAR-10. No official
        checksum exists for this re-encoding, so it is not verified.

License and citation: A. Krizhevsky, "Learning Multiple Layers of Features from Tiny Images", Technical
Report, University of Toronto, 2009. Distributed by the authors for research use.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from fedaug.data.base import Dataset, LoadContext, option_key
from fedaug.data.download import RemoteFile
from fedaug.data.sources.cifar10_jpeg import JPEG_GLOB, load_jpeg_arrays
from fedaug.data.sources.cifar_pickles import images_of, load_pickles, to_float
from fedaug.registry import register
from fedaug.validation import check_bool, check_choice

logger = logging.getLogger(__name__)

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
BATCH_DIR = "cifar-10-batches-py"
ARCHIVE = RemoteFile(
    "cifar-10-python.tar.gz",
    ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
    checksum="c58f30108f718f92721af3b95e74349a",
)
BATCH_MD5 = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
}
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))


def _jpeg_hint(ctx: LoadContext) -> str:
    """Points at the lossy JPEG copy when there is one (for the error of missing official batches)."""
    jpeg = sorted((ctx.data_dir / "cifar10_jpeg_lossy").glob(JPEG_GLOB))
    if not jpeg:
        return ""
    return f"A lossy JPEG copy exists ({jpeg[0]}): variant='jpeg_lossy' (labelled CIFAR-10 (JPEG q75 copy))."


def _to_float(images: np.ndarray, normalize: bool) -> torch.Tensor:
    return to_float(images, CIFAR_MEAN, CIFAR_STD, normalize)


def _official(ctx: LoadContext, normalize: bool, verify: bool) -> tuple[dict[str, torch.Tensor], str]:
    batches, origin = load_pickles(
        ctx,
        dataset_dir="cifar10",
        folder_name=BATCH_DIR,
        archive_file=ARCHIVE,
        md5s=BATCH_MD5,
        title="CIFAR-10",
        kind="batch",
        verify=verify,
        missing_hint=lambda: _jpeg_hint(ctx),
    )
    parts = {
        name: (images_of(content), np.asarray(content[b"labels"], dtype=np.int64))
        for name, content in batches.items()
    }
    train = [parts[name] for name in TRAIN_BATCHES]
    tensors = {
        "x_train": _to_float(np.concatenate([images for images, _ in train]), normalize),
        "y_train": torch.from_numpy(np.concatenate([labels for _, labels in train])),
        "x_test": _to_float(parts["test_batch"][0], normalize),
        "y_test": torch.from_numpy(parts["test_batch"][1]),
    }
    return tensors, f"CIFAR-10 official pickle batches from {origin} (md5-verified, official split)"


def _jpeg(ctx: LoadContext, normalize: bool) -> tuple[dict[str, torch.Tensor], str]:
    folder = ctx.data_dir / "cifar10_jpeg_lossy"
    archives = sorted(folder.glob(JPEG_GLOB))
    if not archives:
        raise ctx.missing(
            [JPEG_GLOB], [folder], hint="This lossy copy cannot be downloaded; use variant='official'."
        )
    logger.info("cifar10: %s not verified (no official checksum exists for the lossy JPEG copy)", archives[0])
    arrays = load_jpeg_arrays(archives[0], CLASSES, ctx.cache_dir)
    tensors = {
        "x_train": _to_float(np.ascontiguousarray(arrays["x_train"].transpose(0, 3, 1, 2)), normalize),
        "y_train": torch.from_numpy(arrays["y_train"].astype(np.int64)),
        "x_test": _to_float(np.ascontiguousarray(arrays["x_test"].transpose(0, 3, 1, 2)), normalize),
        "y_test": torch.from_numpy(arrays["y_test"].astype(np.int64)),
    }
    source = (
        f"WARNING: LOSSY JPEG (quality 75) copy of CIFAR-10 from {archives[0]}; pixels differ from the "
        "original, so accuracies are NOT comparable with published CIFAR-10 results "
        "(reports label its runs CIFAR-10 (JPEG q75 copy))"
    )
    return tensors, source


@register(
    "dataset",
    "cifar10",
    shape="[3,32,32]",
    size="50000 / 10000",
    classes="10",
    source="U. Toronto (Krizhevsky, 2009)",
    license="research use",
)
def load_cifar10(
    ctx: LoadContext, *, variant: str = "official", normalize: bool = True, verify: bool = True
) -> Dataset:
    """Loads CIFAR-10 as ``[N, 3, 32, 32]`` (see the module docstring).

    Args:
        ctx: where to look.
        variant: ``"official"`` (pickle batches, md5-checked) or ``"jpeg_lossy"`` (the lossy copy).
        normalize: standardise per channel with the usual CIFAR-10 mean/std (default True).
        verify: md5-check a local official archive (default True, cached); the batches are always checked.
    """
    check_choice(option_key("cifar10", "variant"), variant, ("official", "jpeg_lossy"))
    check_bool(option_key("cifar10", "normalize"), normalize)
    check_bool(option_key("cifar10", "verify"), verify)
    tensors, source = _official(ctx, normalize, verify) if variant == "official" else _jpeg(ctx, normalize)
    return Dataset(
        name="cifar10",
        x_train=tensors["x_train"],
        y_train=tensors["y_train"],
        x_test=tensors["x_test"],
        y_test=tensors["y_test"],
        num_classes=10,
        class_names=list(CLASSES),
        input_shape=(3, 32, 32),
        source=source,
        mean=CIFAR_MEAN if normalize else None,
        std=CIFAR_STD if normalize else None,
    )
