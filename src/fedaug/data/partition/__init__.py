"""Partitioners: split a training set's labels into per-client index arrays.

Built-ins (registry kind ``"partitioner"``): ``iid``, ``quantity`` (Qua(q)), ``dirichlet`` (Dir(alpha),
hetero-dir), ``shards`` (McMahan et al.), ``multimodal`` (Fed-ZDA) and ``natural`` (one client per group id
of the data: subjects, speakers). Use :func:`make_partition` to get a
seeded, validated, cached :class:`Partition`; :func:`describe` and :func:`plot_heatmap` report it.

Every partitioner has the signature
``fn(labels, *, num_clients, num_classes, rng, **params) -> list[np.ndarray]`` and returns one sorted int64
index array per client, using every index exactly once and no randomness but ``rng``.
"""

from __future__ import annotations

# The public names; the registry imports every module of this package, which registers the partitioners.
from fedaug.data.partition.base import Partition, local_test_split, make_partition
from fedaug.data.partition.dirichlet import dirichlet
from fedaug.data.partition.iid import iid
from fedaug.data.partition.multimodal import multimodal
from fedaug.data.partition.natural import natural
from fedaug.data.partition.quantity import quantity
from fedaug.data.partition.report import describe, plot_heatmap
from fedaug.data.partition.shards import shards

__all__ = [
    "Partition",
    "describe",
    "dirichlet",
    "iid",
    "local_test_split",
    "make_partition",
    "multimodal",
    "natural",
    "plot_heatmap",
    "quantity",
    "shards",
]
