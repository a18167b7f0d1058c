"""Built-in dataset loaders; importing this package registers them all (see :mod:`fedaug.data.datasets`).

One module per dataset: ``uci_har``, ``mnist``, ``fashion_mnist``, ``cifar10`` (+ ``cifar10_jpeg`` helper),
``cifar100`` (both CIFARs read through ``cifar_pickles``),
``fsdd``, ``urbansound8k`` (+ ``audio_common`` helper) and ``synthetic``.
"""

from fedaug.data.sources import (
    cifar10,
    cifar100,
    fashion_mnist,
    fsdd,
    mnist,
    synthetic,
    uci_har,
    urbansound8k,
)

__all__ = ["cifar10", "cifar100", "fashion_mnist", "fsdd", "mnist", "synthetic", "uci_har", "urbansound8k"]
