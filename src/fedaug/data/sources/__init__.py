"""Built-in dataset loaders; importing this package registers them all (see :mod:`fedaug.data.datasets`).

One module per dataset: ``uci_har``, ``mnist``, ``fashion_mnist``, ``cifar10`` (+ ``cifar10_jpeg`` helper),
``cifar100`` (both CIFARs read through ``cifar_pickles``),
``fsdd``, ``urbansound8k`` (+ ``audio_common`` helper) and ``synthetic``; a user's own data in common
formats: ``arrays`` (.npz), ``csv`` (``csv_table``) and ``image_folder`` (+ ``files_common`` helper).
"""

from fedaug.data.sources import (
    arrays,
    cifar10,
    cifar100,
    csv_table,
    fashion_mnist,
    fsdd,
    image_folder,
    mnist,
    synthetic,
    uci_har,
    urbansound8k,
)

__all__ = [
    "arrays",
    "cifar10",
    "cifar100",
    "csv_table",
    "fashion_mnist",
    "fsdd",
    "image_folder",
    "mnist",
    "synthetic",
    "uci_har",
    "urbansound8k",
]
