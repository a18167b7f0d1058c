"""Fashion-MNIST: 28x28 grey-scale images of Zalando articles, IDX format (same files and parser as MNIST).

Data: 10 classes (T-shirt/top, Trouser, Pullover, Dress, Coat, Sandal, Shirt, Sneaker, Bag, Ankle boot),
official split 60000 train / 10000 test. Output ``[N, 1, 28, 28]`` float32 in [0, 1], standardised by default
(``normalize=True``) with mean 0.2860 / std 0.3530.

Files: the four IDX ``.gz`` files (names as for MNIST) in ``<data_dir>/fashion_mnist/``, torchvision's
``<data_dir>/FashionMNIST/raw/``, or the Debian package ``dataset-fashion-mnist``
(``/usr/share/datasets/fashion-mnist/``), which is found automatically. ``download=True`` fetches them from
Zalando's S3 bucket (then the GitHub repository), verified against the official md5s. Local copies of the
official size are verified like MNIST's (``verify=True``, the default; ``verify=False`` skips it).

License and citation: MIT, Zalando SE. H. Xiao, K. Rasul, R. Vollgraf, "Fashion-MNIST: a Novel Image Dataset
for Benchmarking Machine Learning Algorithms", arXiv:1708.07747, 2017.
"""

from __future__ import annotations

from pathlib import Path

from fedaug.data.base import Dataset, LoadContext, option_key
from fedaug.data.sources.mnist import IDX_FILES, download_idx, find_idx_folder, idx_dataset, official_idx
from fedaug.registry import register
from fedaug.validation import check_bool

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MIRRORS = (
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
)
FASHION_MD5 = {
    "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
    "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
    "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
    "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
}
FASHION_CONTENT_MD5 = {  # md5 of the uncompressed files
    "train-images-idx3-ubyte.gz": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
    "train-labels-idx1-ubyte.gz": "9018921c3c673c538a1fc5bad174d6f9",
    "t10k-images-idx3-ubyte.gz": "8181f5470baa50b63fa0f6fddb340f0a",
    "t10k-labels-idx1-ubyte.gz": "15d484375f8d13e6eb1aabb0c3f46965",
}
FASHION_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]
FASHION_MEAN, FASHION_STD = 0.2860, 0.3530


@register(
    "dataset",
    "fashion_mnist",
    shape="[1,28,28]",
    size="60000 / 10000",
    classes="10",
    source="Zalando (Xiao et al., arXiv 2017)",
    license="MIT",
)
def load_fashion_mnist(ctx: LoadContext, *, normalize: bool = True, verify: bool = True) -> Dataset:
    """Loads Fashion-MNIST as ``[N, 1, 28, 28]`` (see the module docstring).

    Args:
        ctx: where to look.
        normalize: standardise with mean 0.2860 / std 0.3530 (default True); else pixels are in [0, 1].
        verify: check files of the official size against the official md5s (default True; cached).
    """
    check_bool(option_key("fashion_mnist", "normalize"), normalize)
    check_bool(option_key("fashion_mnist", "verify"), verify)
    folders = [ctx.data_dir / "fashion_mnist", ctx.data_dir / "FashionMNIST" / "raw", DEBIAN_DIR]
    folder = find_idx_folder(folders)
    if folder is None and ctx.download:
        download_idx(folders[0], FASHION_MIRRORS, FASHION_MD5)
        folder = folders[0]
    if folder is None:
        raise ctx.missing(IDX_FILES, folders, hint="On Debian/Ubuntu: apt-get install dataset-fashion-mnist.")
    return idx_dataset(
        "fashion_mnist",
        folder,
        class_names=list(FASHION_CLASSES),
        mean=FASHION_MEAN,
        std=FASHION_STD,
        normalize=normalize,
        source=f"Fashion-MNIST idx files from {folder} (official split)",
        official=official_idx(FASHION_MD5, FASHION_CONTENT_MD5) if verify else None,
    )
