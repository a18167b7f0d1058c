"""CIFAR-100: 32x32 colour images in 100 classes grouped into 20 superclasses (A. Krizhevsky, 2009).

Data: official split 50000 train / 10000 test, 500 / 100 images per fine class. Output ``[N, 3, 32, 32]``
float32, scaled to [0, 1] and by default (``normalize=True``) standardised per channel with the usual
CIFAR-100 mean (0.5071, 0.4865, 0.4409) / std (0.2673, 0.2564, 0.2762). ``labels="fine"`` (default, 100
classes, what Fed-AugMix's Table III uses) or ``"coarse"`` (the 20 superclasses); class names come from the
release's own ``meta`` file.

Files: the python release ``cifar-100-python`` (pickled dicts ``train``, ``test`` with ``b"data"``,
``b"fine_labels"``, ``b"coarse_labels"``, and ``meta`` with the label names), read from
``<data_dir>/cifar100/cifar-100-python/`` or straight from the official ``cifar-100-python.tar.gz`` in
``<data_dir>/cifar100/``. Every file is md5-checked against the published checksums before it is
unpickled (:mod:`fedaug.data.sources.cifar_pickles`). ``download=True`` fetches the official archive (md5
``eb9058c3a382ffc7106e4002c42a8d85``) from the University of Toronto. A local archive is md5-checked once
per file version (cached); ``verify=False`` skips that (the pickles are still checked). There is no offline
copy in ``../shared/data``.

License and citation: A. Krizhevsky, "Learning Multiple Layers of Features from Tiny Images", Technical
Report, University of Toronto, 2009. Distributed by the authors for research use.
"""

from __future__ import annotations

import numpy as np
import torch

from fedaug.data.base import Dataset, LoadContext, option_key
from fedaug.data.download import RemoteFile
from fedaug.data.sources.cifar_pickles import images_of, load_pickles, to_float
from fedaug.registry import register
from fedaug.validation import check_bool, check_choice

CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)
FOLDER = "cifar-100-python"
ARCHIVE = RemoteFile(
    "cifar-100-python.tar.gz",
    ("https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",),
    checksum="eb9058c3a382ffc7106e4002c42a8d85",
)
FILE_MD5 = {
    "train": "16019d7e3df5f24257cddd939b257f8d",
    "test": "f0ef6b0ae62326f3e7ffdfab6717acfc",
    "meta": "7973b15100ade9c7d40fb424638fde48",
}
LABEL_KINDS = ("fine", "coarse")


@register(
    "dataset",
    "cifar100",
    shape="[3,32,32]",
    size="50000 / 10000",
    classes="100 (or 20)",
    source="U. Toronto (Krizhevsky, 2009)",
    license="research use",
)
def load_cifar100(
    ctx: LoadContext, *, labels: str = "fine", normalize: bool = True, verify: bool = True
) -> Dataset:
    """Loads CIFAR-100 as ``[N, 3, 32, 32]`` (see the module docstring).

    Args:
        ctx: where to look.
        labels: ``"fine"`` (100 classes) or ``"coarse"`` (20 superclasses).
        normalize: standardise per channel with the usual CIFAR-100 mean/std (default True).
        verify: md5-check a local official archive (default True, cached); the pickles are always checked.
    """
    check_choice(option_key("cifar100", "labels"), labels, LABEL_KINDS)
    check_bool(option_key("cifar100", "normalize"), normalize)
    check_bool(option_key("cifar100", "verify"), verify)
    parts, origin = load_pickles(
        ctx,
        dataset_dir="cifar100",
        folder_name=FOLDER,
        archive_file=ARCHIVE,
        md5s=FILE_MD5,
        title="CIFAR-100",
        kind="file",
        verify=verify,
    )
    key = f"{labels}_label".encode()
    names = [n.decode() for n in parts["meta"][key + b"_names"]]

    def split(name: str) -> tuple[torch.Tensor, torch.Tensor]:
        x = to_float(images_of(parts[name]), CIFAR100_MEAN, CIFAR100_STD, normalize)
        return x, torch.from_numpy(np.asarray(parts[name][key + b"s"], dtype=np.int64))

    (x_train, y_train), (x_test, y_test) = split("train"), split("test")
    return Dataset(
        name="cifar100",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        num_classes=len(names),
        class_names=names,
        input_shape=(3, 32, 32),
        source=f"CIFAR-100 official pickles from {origin} (md5-verified, official split, {labels} labels)",
        mean=CIFAR100_MEAN if normalize else None,
        std=CIFAR100_STD if normalize else None,
    )
