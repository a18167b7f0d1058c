"""Quantity-based label skew, Qua(q): every client holds exactly q classes.

"#C = q" label skew of NIID-Bench: Q. Li, Y. Diao, Q. Chen and B. He, "Federated Learning on Non-IID Data
Silos: An Experimental Study", ICDE 2022 (arXiv:2102.02079), as implemented by FedLab's
``label_skew_quantity_based_partition`` and used by FLea (paper: Qua(q)). Client c always holds class
``c mod C`` plus q-1 further distinct classes drawn uniformly at random; each class's samples are shuffled and
split evenly among the clients holding it, in client order. Client sizes therefore differ with the number of
clients sharing each class; there is no minimum-size retry.
"""

from __future__ import annotations

import numpy as np

from fedaug.data.partition._common import assign_class_sets, check_common, split_among_holders
from fedaug.errors import PartitionError
from fedaug.registry import register


@register(
    "partitioner",
    "quantity",
    summary="Qua(q): every client holds q classes, each split evenly among its holders",
)
def quantity(
    labels: np.ndarray,
    *,
    num_clients: int,
    num_classes: int,
    rng: np.random.Generator,
    classes_per_client: int,
) -> list[np.ndarray]:
    """Gives every client ``classes_per_client`` classes and splits each class evenly among its holders.

    With fewer clients than classes (K < C), class k is additionally given to client ``k mod K`` so that every
    sample is used; those clients then hold more than q classes.

    Args:
        labels: Integer label of every training sample, shape ``[N]``.
        num_clients: Number of clients K, ``1 <= K <= N``.
        num_classes: Number of classes C.
        rng: Source of randomness; nothing else is used.
        classes_per_client: Number of distinct classes per client (the paper's q), ``1 <= q <= C``.

    Returns:
        One sorted int64 index array per client.

    Raises:
        PartitionError: If q or K is out of range or the labels are invalid.
    """
    labels = check_common(labels, num_clients, num_classes)
    if not 1 <= classes_per_client <= num_classes:
        raise PartitionError(
            f"classes_per_client (q) must be between 1 and the number of classes ({num_classes}), "
            f"got {classes_per_client}"
        )
    class_sets = assign_class_sets(num_clients, num_classes, classes_per_client, rng)
    return split_among_holders(labels, class_sets, num_classes, rng)
