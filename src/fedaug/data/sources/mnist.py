"""MNIST handwritten digits, read from the original big-endian IDX files (gzipped or not).

IDX format: a 4-byte magic number ``0x00 0x00 <dtype=0x08 (uint8)> <ndim>`` (2049 for label files, 2051
for image files), then ``ndim`` big-endian uint32 dimension sizes, then the uint8 data. A wrong magic number,
a size that does not match the dimensions, or a truncated/corrupt gzip stream raises DatasetError naming
the file.

Data: 28x28 grey-scale digits, 10 classes ``"0".."9"``, official split 60000 train / 10000 test. Output
``[N, 1, 28, 28]`` float32 scaled to [0, 1] and, by default (``normalize=True``), standardised with the
customary mean 0.1307 / std 0.3081.

Files (in ``<data_dir>/mnist/`` or torchvision's ``<data_dir>/MNIST/raw/``): ``train-images-idx3-ubyte.gz``,
``train-labels-idx1-ubyte.gz``, ``t10k-images-idx3-ubyte.gz``, ``t10k-labels-idx1-ubyte.gz`` (the same names
without ``.gz`` also work). ``download=True`` fetches them from the torchvision S3 mirror, then Yann LeCun's
site, verified against the official md5s of the ``.gz`` files. Local copies of the official size are verified
(``verify=True``, the default) against the official md5 of the ``.gz`` or, for re-compressed or unpacked
copies, of the uncompressed data, once per file version (:mod:`fedaug.data.checksums`); ``verify=False``
skips this for deliberately modified copies. Files of other sizes (hand-made subsets) are checked
structurally only.

License and citation: Y. LeCun, C. Cortes, C. J. C. Burges, "The MNIST database of handwritten digits";
CC BY-SA 3.0.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from fedaug.data.base import Dataset, LoadContext, option_key
from fedaug.data.checksums import Official, verify_files
from fedaug.data.download import RemoteFile, download_file
from fedaug.errors import DatasetError
from fedaug.registry import register
from fedaug.validation import check_bool

IDX_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)
MNIST_MIRRORS = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/")
MNIST_MD5 = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
# md5 of the uncompressed official files (what a re-compressed or unpacked copy is checked against).
MNIST_CONTENT_MD5 = {
    "train-images-idx3-ubyte.gz": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte.gz": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte.gz": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte.gz": "27ae3e4e09519cfbb04c329615203637",
}
# Uncompressed sizes of the official files (MNIST and Fashion-MNIST alike).
IDX_SIZES = {
    "train-images-idx3-ubyte.gz": 16 + 60000 * 28 * 28,
    "train-labels-idx1-ubyte.gz": 8 + 60000,
    "t10k-images-idx3-ubyte.gz": 16 + 10000 * 28 * 28,
    "t10k-labels-idx1-ubyte.gz": 8 + 10000,
}
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049


def parse_idx(data: bytes, *, expected_magic: int, name: str) -> np.ndarray:
    """Parses an uncompressed IDX byte string into a uint8 array, validating the magic number and size."""
    if len(data) < 4:
        raise DatasetError(f"IDX file {name} is truncated ({len(data)} bytes)")
    magic = int.from_bytes(data[:4], "big")
    if magic != expected_magic:
        raise DatasetError(
            f"IDX file {name} has magic number {magic}, expected {expected_magic}; the file is corrupt"
        )
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DatasetError(f"IDX file {name} is truncated inside its header ({len(data)} bytes)")
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    expected_bytes = header + int(np.prod(dims))
    if len(data) != expected_bytes:
        raise DatasetError(
            f"IDX file {name} has {len(data)} bytes, expected {expected_bytes} for dimensions {dims}"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def read_idx(path: Path, *, expected_magic: int) -> np.ndarray:
    """Reads a (gzipped if the name ends in .gz) IDX file; raises DatasetError naming it when corrupt."""
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"cannot read IDX file {path}: {exc} (truncated or corrupt gzip?)") from exc
    return parse_idx(data, expected_magic=expected_magic, name=str(path))


def _find_file(folder: Path, filename: str) -> Path | None:
    for candidate in (folder / filename, folder / filename.removesuffix(".gz")):
        if candidate.exists():
            return candidate
    return None


def find_idx_folder(folders: Sequence[Path]) -> Path | None:
    """The first folder holding all four IDX files (gzipped or not)."""
    return next((f for f in folders if all(_find_file(f, name) for name in IDX_FILES)), None)


def download_idx(folder: Path, mirrors: Sequence[str], md5s: dict[str, str]) -> None:
    """Downloads the four IDX .gz files into ``folder`` (md5-verified, atomic)."""
    for name in IDX_FILES:
        if _find_file(folder, name) is None:
            download_file(RemoteFile(name, tuple(m + name for m in mirrors), md5s[name]), folder)


def official_idx(md5s: dict[str, str], content_md5s: dict[str, str]) -> dict[str, Official]:
    """The official records of the four IDX files (``.gz`` md5, uncompressed md5 and size)."""
    sizes = IDX_SIZES
    return {name: Official(name, md5s.get(name), content_md5s.get(name), sizes[name]) for name in IDX_FILES}


def verify_idx_folder(folder: Path, official: dict[str, Official], dataset: str) -> None:
    """Checks the IDX files in ``folder`` against ``official`` (cached; see :mod:`fedaug.data.checksums`)."""
    files = [(path, official[name]) for name in IDX_FILES if (path := _find_file(folder, name)) is not None]
    verify_files(files, dataset=dataset)


def load_idx_split(folder: Path, prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """Images ``[N, 28, 28]`` and labels ``[N]`` of one split (``prefix`` is ``"train"`` or ``"t10k"``)."""
    image_file = _find_file(folder, f"{prefix}-images-idx3-ubyte.gz")
    label_file = _find_file(folder, f"{prefix}-labels-idx1-ubyte.gz")
    if image_file is None or label_file is None:
        raise DatasetError(f"{folder} lacks the {prefix} image or label IDX file")
    images = read_idx(image_file, expected_magic=IMAGES_MAGIC)
    labels = read_idx(label_file, expected_magic=LABELS_MAGIC)
    if images.shape[0] != labels.shape[0]:
        raise DatasetError(
            f"{image_file} has {images.shape[0]} images but {label_file} has {labels.shape[0]} labels"
        )
    if labels.size and labels.max() > 9:
        raise DatasetError(f"{label_file} has labels up to {labels.max()}, expected 0..9")
    return images, labels


def idx_dataset(
    name: str,
    folder: Path,
    *,
    class_names: list[str],
    mean: float,
    std: float,
    normalize: bool,
    source: str,
    official: dict[str, Official] | None = None,
) -> Dataset:
    """Builds the Dataset from a folder with the four IDX files (shared by mnist and fashion_mnist).

    ``official``: the files' official checksums to verify them against first; None skips verification.
    """
    if official is not None:
        verify_idx_folder(folder, official, name)
    splits = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images, labels = load_idx_split(folder, prefix)
        x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
        if normalize:
            x = (x - mean) / std
        splits[split] = (x, torch.from_numpy(labels.astype(np.int64)))
    return Dataset(
        name=name,
        x_train=splits["train"][0],
        y_train=splits["train"][1],
        x_test=splits["test"][0],
        y_test=splits["test"][1],
        num_classes=10,
        class_names=class_names,
        input_shape=(1, 28, 28),
        source=source,
        mean=(mean,) if normalize else None,
        std=(std,) if normalize else None,
    )


@register(
    "dataset",
    "mnist",
    shape="[1,28,28]",
    size="60000 / 10000",
    classes="10",
    source="LeCun, Cortes and Burges",
    license="CC BY-SA 3.0",
)
def load_mnist(ctx: LoadContext, *, normalize: bool = True, verify: bool = True) -> Dataset:
    """Loads MNIST as ``[N, 1, 28, 28]`` (see the module docstring).

    Args:
        ctx: where to look.
        normalize: standardise with mean 0.1307 / std 0.3081 (default True); else pixels are in [0, 1].
        verify: check files of the official size against the official md5s (default True; cached).
    """
    check_bool(option_key("mnist", "normalize"), normalize)
    check_bool(option_key("mnist", "verify"), verify)
    folders = [ctx.data_dir / "mnist", ctx.data_dir / "MNIST" / "raw"]
    folder = find_idx_folder(folders)
    if folder is None and ctx.download:
        download_idx(folders[0], MNIST_MIRRORS, MNIST_MD5)
        folder = folders[0]
    if folder is None:
        raise ctx.missing(IDX_FILES, folders)
    return idx_dataset(
        "mnist",
        folder,
        class_names=[str(d) for d in range(10)],
        mean=MNIST_MEAN,
        std=MNIST_STD,
        normalize=normalize,
        source=f"MNIST idx files from {folder} (official split)",
        official=official_idx(MNIST_MD5, MNIST_CONTENT_MD5) if verify else None,
    )
