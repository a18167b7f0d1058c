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
        archive (md5 ``c58f30108f718f92721af3b95e74349a``) from the University of Toronto.
    ``jpeg_lossy``: the JPEG (quality 75) copy ``<data_dir>/cifar10_jpeg_lossy/CIFAR-10-images_*.tar.gz`` (see
        :mod:`fedaug.data.sources.cifar10_jpeg`). LOSSY: for smoke runs only; ``source`` says so.

License and citation: A. Krizhevsky, "Learning Multiple Layers of Features from Tiny Images", Technical
Report, University of Toronto, 2009. Distributed by the authors for research use.
"""

from __future__ import annotations

import hashlib
import pickle
import tarfile
import zlib
from pathlib import Path

import numpy as np
import torch

from fedaug.data.datasets import Dataset, LoadContext, check_bool, check_choice
from fedaug.data.download import RemoteFile, download_file, verify_checksum
from fedaug.data.sources.cifar10_jpeg import JPEG_GLOB, load_jpeg_arrays
from fedaug.errors import DatasetError
from fedaug.registry import register

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


def parse_batch(data: bytes, batch: str, shown: str) -> tuple[np.ndarray, np.ndarray]:
    """Checks a batch's md5, unpickles it and returns images ``[N, 3, 32, 32]`` uint8 and labels ``[N]``.

    Args:
        data: the file's bytes.
        batch: its official name (``data_batch_1`` .. ``test_batch``), which selects the expected md5.
        shown: where it came from, for error messages.
    """
    actual = hashlib.md5(data, usedforsecurity=False).hexdigest()
    if actual != BATCH_MD5[batch]:
        raise DatasetError(
            f"checksum mismatch for CIFAR-10 batch {shown}: expected md5 {BATCH_MD5[batch]}, got {actual}"
        )
    content = pickle.loads(data, encoding="bytes")  # safe: md5 verified against the official file above
    images = np.asarray(content[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
    return images, np.asarray(content[b"labels"], dtype=np.int64)


def _read_batches(ctx: LoadContext) -> tuple[dict[str, tuple[bytes, str]], str] | None:
    """Bytes and display name of every batch, from the folder or the official archive; None if absent."""
    root = ctx.data_dir / "cifar10"
    folder = root / BATCH_DIR
    if all((folder / name).exists() for name in BATCH_MD5):
        return {name: ((folder / name).read_bytes(), str(folder / name)) for name in BATCH_MD5}, f"{folder}"
    archive = root / ARCHIVE.filename
    if not archive.exists() and not ctx.download:
        return None
    if archive.exists():
        verify_checksum(archive, ARCHIVE.checksum or "", algorithm="md5")
    else:
        archive = download_file(ARCHIVE, root)
    return _read_archive(archive), f"official archive {archive}"


def _read_archive(archive: Path) -> dict[str, tuple[bytes, str]]:
    found: dict[str, tuple[bytes, str]] = {}
    try:
        with tarfile.open(archive, "r:gz") as tf:
            for member in tf:
                name = member.name.rsplit("/", 1)[-1]
                handle = tf.extractfile(member) if member.isfile() and name in BATCH_MD5 else None
                if handle is not None:
                    found[name] = (handle.read(), f"{archive}:{member.name}")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"cannot read CIFAR-10 archive {archive}: {exc}") from exc
    missing = sorted(set(BATCH_MD5) - set(found))
    if missing:
        raise DatasetError(f"CIFAR-10 archive {archive} lacks {', '.join(missing)}")
    return found


def _to_float(images: np.ndarray, normalize: bool) -> torch.Tensor:
    x = torch.from_numpy(images).float().div_(255.0)
    if normalize:
        x = (x - torch.tensor(CIFAR_MEAN).view(1, 3, 1, 1)) / torch.tensor(CIFAR_STD).view(1, 3, 1, 1)
    return x


def _official(ctx: LoadContext, normalize: bool) -> tuple[dict[str, torch.Tensor], str]:
    batches = _read_batches(ctx)
    if batches is None:
        jpeg = sorted((ctx.data_dir / "cifar10_jpeg_lossy").glob(JPEG_GLOB))
        hint = (
            f"A lossy JPEG copy exists ({jpeg[0]}): pass variant='jpeg_lossy' for smoke runs." if jpeg else ""
        )
        root = ctx.data_dir / "cifar10"
        raise ctx.missing([f"{BATCH_DIR}/{{{', '.join(BATCH_MD5)}}}", ARCHIVE.filename], [root], hint=hint)
    files, origin = batches
    parts = {name: parse_batch(data, name, shown) for name, (data, shown) in files.items()}
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
        "(smoke runs and demos only)"
    )
    return tensors, source


@register("dataset", "cifar10")
def load_cifar10(ctx: LoadContext, *, variant: str = "official", normalize: bool = True) -> Dataset:
    """Loads CIFAR-10 as ``[N, 3, 32, 32]`` (see the module docstring).

    Args:
        ctx: where to look.
        variant: ``"official"`` (pickle batches, md5-checked) or ``"jpeg_lossy"`` (smoke runs only).
        normalize: standardise per channel with the usual CIFAR-10 mean/std (default True).
    """
    check_choice("cifar10", "variant", variant, ("official", "jpeg_lossy"))
    check_bool("cifar10", "normalize", normalize)
    tensors, source = _official(ctx, normalize) if variant == "official" else _jpeg(ctx, normalize)
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
