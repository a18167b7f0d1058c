"""Multimodal non-i.i.d. partitioner: groups ("modes") of clients of unequal size, each with its own classes.

Fed-ZDA: W. Hao, M. El-Khamy, J. Lee, J. Zhang, K. J. Liang, C. Chen and L. Carin, "Towards Fair Federated
Learning with Zero-Shot Data Augmentation", CVPR Workshops 2021 (arXiv:2104.13417), which follows WAFFLe
(Hao et al., arXiv:2008.05687): "there exist subpopulations, with some being more prevalent than others; each
subpopulation group can be thought of as a mode of the overall distribution", and each client owns at most two
classes.

Paper is silent on the exact construction, so we build it as follows (documented parameters):

1. Mode sizes: mode m (0-based) gets a share of the K clients proportional to ``(m + 1) ** -size_skew``
   (a Zipf law; ``size_skew = 0`` gives equal modes), apportioned by largest remainder with at least one
   client per mode. Clients are numbered mode by mode (mode 0 = clients ``0 .. n_0 - 1``).
2. Mode classes: like Qua(q) at the level of modes, on a random relabelling of the classes: mode m always
   holds class ``perm[m mod C]`` plus ``classes_per_mode - 1`` random others, so every class has a holder and
   class combinations are random. Two modes may draw the same combination.
3. Samples, ``balance="classes"`` (default): every client of a mode holds all of the mode's classes; each
   class's shuffled samples are split evenly among all clients holding it. A class shared by a large and a
   small mode therefore goes mostly to the large mode, which makes its class combination prevalent and the
   other rare. Every index is used exactly once, so the overall class balance of the dataset is unchanged;
   prevalence shows in how many clients, and how much of each shared class, a class combination receives
   (client sizes differ: a client of a small mode holds more).
4. Samples, ``balance="clients"``: every client holds the same number ``s`` of samples of each of its classes,
   the largest that every class can supply to all its holders (``s = min_k floor(n_k / holders_k)``), drawn
   without replacement from the class's shuffled samples. A class's total is then proportional to the number
   of clients holding it, so the classes of prevalent modes dominate the aggregate data, which is what the
   paper states ("the classes are imbalanced in the data set aggregating from all clients' data"); samples
   beyond ``s * holders_k`` are not used.

Deviation from paper: the paper (and WAFFLe, which we could not consult) gives no construction; the two
``balance`` values are our two readings, and ``balance="clients"`` is the one with the stated property (an
imbalanced aggregate), at the price of leaving data unused.
"""

from __future__ import annotations

import numpy as np

from fedaug.data.partition._common import (
    assign_class_sets,
    check_common,
    group_by_owner,
    holders_by_class,
    split_among_holders,
)
from fedaug.errors import PartitionError
from fedaug.registry import register
from fedaug.validation import check_choice, check_number

BALANCES = ("classes", "clients")


def mode_sizes(num_clients: int, num_modes: int, size_skew: float) -> np.ndarray:
    """Clients per mode: Zipf shares ``(m + 1) ** -size_skew``, at least one each, largest remainder."""
    weights = np.arange(1, num_modes + 1, dtype=float) ** -size_skew
    quota = weights / weights.sum() * (num_clients - num_modes)
    sizes: np.ndarray = np.floor(quota).astype(np.int64)
    remainder_order = np.argsort(-(quota - sizes), kind="stable")
    sizes[remainder_order[: num_clients - num_modes - int(sizes.sum())]] += 1
    sizes += 1
    return sizes


@register(
    "partitioner",
    "multimodal",
    summary="Fed-ZDA's multimodal non-IID: groups of clients share a class subset",
)
def multimodal(
    labels: np.ndarray,
    *,
    num_clients: int,
    num_classes: int,
    rng: np.random.Generator,
    num_modes: int | None = None,
    classes_per_mode: int = 2,
    size_skew: float = 1.0,
    balance: str = "classes",
) -> list[np.ndarray]:
    """Splits clients into modes of Zipf-distributed size, each mode sharing its own class subset.

    Args:
        labels: Integer label of every training sample, shape ``[N]``.
        num_clients: Number of clients K, ``1 <= K <= N``.
        num_classes: Number of classes C.
        rng: Source of randomness; nothing else is used.
        num_modes: Number of modes M, ``1 <= M <= K``; ``None`` means ``min(C, K)``.
        classes_per_mode: Classes held by each mode (and so by each of its clients), ``1 <= q <= C``;
            Fed-ZDA: 2.
        size_skew: Zipf exponent of the mode sizes, >= 0; 0 gives equal modes, 1 (default) gives shares
            proportional to 1, 1/2, 1/3, ...
        balance: ``"classes"`` (every sample used once, the dataset's class balance kept, client sizes vary)
            or ``"clients"`` (every client the same size, class totals proportional to their holders, some
            samples unused); see the module docstring.

    Returns:
        One sorted int64 index array per client (with ``balance="clients"`` they do not cover every index).

    Raises:
        PartitionError: If a parameter is out of range, K or the labels are invalid.
    """
    labels = check_common(labels, num_clients, num_classes)
    num_modes = min(num_classes, num_clients) if num_modes is None else num_modes
    if not 1 <= num_modes <= num_clients:
        raise PartitionError(f"num_modes must be between 1 and num_clients ({num_clients}), got {num_modes}")
    if not 1 <= classes_per_mode <= num_classes:
        raise PartitionError(
            f"classes_per_mode must be between 1 and the number of classes ({num_classes}), "
            f"got {classes_per_mode}"
        )
    check_number("size_skew", size_skew, 0, error=PartitionError)
    check_choice("balance", balance, BALANCES, error=PartitionError)
    relabel = rng.permutation(num_classes)
    mode_classes = [
        np.sort(relabel[c]) for c in assign_class_sets(num_modes, num_classes, classes_per_mode, rng)
    ]
    sizes = mode_sizes(num_clients, num_modes, size_skew)
    class_sets = [classes for classes, size in zip(mode_classes, sizes, strict=True) for _ in range(size)]
    if balance == "clients":
        return equal_share_per_holder(labels, class_sets, num_classes, rng)
    return split_among_holders(labels, class_sets, num_classes, rng)


def equal_share_per_holder(
    labels: np.ndarray, class_sets: list[np.ndarray], num_classes: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Gives every holder of class k the same ``s`` samples of it, ``s`` the largest all classes can supply.

    Args:
        labels: Labels, shape ``[N]``.
        class_sets: Class ids held by each client.
        num_classes: Number of classes C.
        rng: Source of randomness (one permutation per class, classes in order).

    Returns:
        One sorted int64 index array per client; indices beyond ``s * holders_k`` of class k are unused.

    Raises:
        PartitionError: If some class has fewer samples than holders (``s`` would be 0).
    """
    holders = holders_by_class(class_sets, num_classes)
    available = np.bincount(labels, minlength=num_classes)
    held = [k for k in range(num_classes) if holders[k]]
    share = min(int(available[k]) // len(holders[k]) for k in held)
    if share == 0:
        short = min(held, key=lambda k: int(available[k]) // len(holders[k]))
        raise PartitionError(
            f"balance='clients' cannot give every client a sample of each of its classes: class {short} has "
            f"{available[short]} samples for {len(holders[short])} clients; use fewer clients or "
            "balance='classes'"
        )
    owner = np.full(labels.size, -1, dtype=np.int64)
    for k in range(num_classes):
        idx = rng.permutation(np.flatnonzero(labels == k))
        for rank, client in enumerate(holders[k]):
            owner[idx[rank * share : (rank + 1) * share]] = client
    return group_by_owner(owner, len(class_sets))
