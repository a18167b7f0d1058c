"""Built-in dataset loaders; importing this package registers them all (see :mod:`fedaug.data.datasets`).

One module per dataset: ``uci_har``, ``mnist``, ``fashion_mnist``, ``cifar10`` (+ ``cifar10_jpeg`` helper),
``fsdd``, ``urbansound8k`` (+ ``audio_common`` helper) and ``synthetic``.
"""

from fedaug.data.sources import (
    cifar10,
    fashion_mnist,
    fsdd,
    mnist,
    synthetic,
    uci_har,
    urbansound8k,
)

__all__ = ["cifar10", "fashion_mnist", "fsdd", "mnist", "synthetic", "uci_har", "urbansound8k"]
