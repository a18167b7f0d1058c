"""Distribution-based label skew, Dir(alpha): per-class Dirichlet proportions ("hetero-dir").

NIID-Bench: Q. Li, Y. Diao, Q. Chen and B. He, "Federated Learning on Non-IID Data Silos: An Experimental
Study", ICDE 2022 (arXiv:2102.02079), as implemented by FedLab's ``hetero_dir_partition`` and used by FLea
(paper: Dir(mu)). For every class k, proportions p ~ Dir_K(alpha) over the clients decide how class k's
shuffled samples are cut; clients that already hold >= N/K samples get p_j = 0 (the "balance" cap). The whole
draw is repeated until the smallest client holds at least ``min_size`` samples (at most ``max_tries`` times;
the default target C is halved when it is missed, see :func:`dirichlet`). This is *not* a per-client
Dirichlet over classes: small alpha gives clients few classes and very unequal sizes.
"""

from __future__ import annotations

import logging

import numpy as np

from fedaug.data.partition._common import check_common, group_by_owner
from fedaug.errors import PartitionError
from fedaug.registry import register
from fedaug.validation import check_int, check_number

logger = logging.getLogger(__name__)

LAST_TARGET_TRIES = 100
"""With the default ``min_size``, a target of 1 that ``max_tries`` draws miss gets this many times more."""


def default_min_size(num_samples: int, num_clients: int, num_classes: int) -> int:
    """The default ``min_size``: C as in the official code, capped at half the mean client size.

    The FLea/FedLab code requires every client to hold at least C samples. With scarce data (small N/K) that
    can be impossible, so the default is ``min(C, max(1, N // (2K)))``; for the paper's settings (N/K of about
    50 or 100) this is exactly C.
    """
    return min(num_classes, max(1, num_samples // (2 * num_clients)))


def _draw_counts(
    class_sizes: np.ndarray,
    num_clients: int,
    alpha: float,
    balance: bool,
    rng: np.random.Generator,
    batch: int,
) -> np.ndarray:
    """``batch`` independent hetero-dir draws of the sample counts, shape ``[batch, C, K]``.

    Shuffling class k and cutting it at ``floor(cumsum(p) * n_k)`` gives client j a uniformly random subset of
    ``counts[k, j]`` samples, so the counts can be drawn first (vectorised over many tries) and the samples
    assigned only for the accepted try.
    """
    cap = class_sizes.sum() / num_clients
    counts = np.zeros((batch, class_sizes.size, num_clients), dtype=np.int64)
    sizes = np.zeros((batch, num_clients), dtype=np.int64)
    for k, n_k in enumerate(class_sizes):
        if n_k == 0:
            continue
        proportions = rng.dirichlet(np.full(num_clients, alpha), size=batch)
        eligible = sizes < cap if balance else np.ones_like(sizes, dtype=bool)
        proportions = proportions * eligible
        total = proportions.sum(axis=1, keepdims=True)
        underflow = ~(total[:, 0] > 0)  # every weight underflowed to 0 (tiny alpha): use the eligible clients
        proportions[underflow] = eligible[underflow]
        total[underflow] = eligible[underflow].sum(axis=1, keepdims=True)
        cuts = (np.cumsum(proportions / total, axis=1) * n_k).astype(np.int64)
        cuts[:, -1] = n_k  # the last client takes the rest, as with np.split at the first K-1 cuts
        counts[:, k] = np.diff(np.minimum(cuts, n_k), axis=1, prepend=0)
        sizes += counts[:, k]
    return counts


def _search(
    class_sizes: np.ndarray,
    num_clients: int,
    alpha: float,
    balance: bool,
    min_size: int,
    max_tries: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray | None, int]:
    """Draws up to ``max_tries`` count matrices; returns the first whose smallest client has >= min_size.

    Returns:
        ``(counts [C, K] or None, smallest client size seen in the last try)``.
    """
    batch_limit = max(1, min(256, 2**20 // (class_sizes.size * num_clients)))
    tries, smallest = 0, 0
    while tries < max_tries:
        batch = min(batch_limit, max_tries - tries)
        counts = _draw_counts(class_sizes, num_clients, alpha, balance, rng, batch)
        minima = counts.sum(axis=1).min(axis=1)
        hits = np.flatnonzero(minima >= min_size)
        if hits.size:
            return counts[hits[0]], int(minima[hits[0]])
        tries += batch
        smallest = int(minima[-1])
    return None, smallest


@register("partitioner", "dirichlet", summary="Dir(alpha) label skew per class (NIID-Bench hetero-dir)")
def dirichlet(
    labels: np.ndarray,
    *,
    num_clients: int,
    num_classes: int,
    rng: np.random.Generator,
    alpha: float,
    min_size: int | None = None,
    balance: bool = True,
    max_tries: int = 1000,
    index_blocks: int = 1,
) -> list[np.ndarray]:
    """Per-class Dirichlet split with the NIID-Bench balance cap and a minimum-size retry.

    With an explicit ``min_size`` the draw is repeated up to ``max_tries`` times and a
    :class:`~fedaug.errors.PartitionError` is raised if no draw meets it. With ``min_size=None`` the target
    is :func:`default_min_size` (C, as in the official code); if ``max_tries`` draws miss it, the target is
    halved (down to 1), logged at INFO level, instead of failing.

    Args:
        labels: Integer label of every training sample, shape ``[N]``.
        num_clients: Number of clients K, ``1 <= K <= N``.
        num_classes: Number of classes C.
        rng: Source of randomness; nothing else is used.
        alpha: Dirichlet concentration (the paper's mu), > 0; small values give strong label skew.
        min_size: Smallest allowed client size (strict); ``None`` means :func:`default_min_size`, relaxed by
            halving when it cannot be met. ``0`` disables the retry.
        balance: Apply the cap that stops clients holding >= N/K samples from receiving more.
        max_tries: Draws attempted per target size before giving up (or relaxing); with the default
            ``min_size``, the last target (1 sample a client) gets ``LAST_TARGET_TRIES`` times as many more.
        index_blocks: Split the samples, in dataset order, into this many contiguous blocks of (nearly)
            equal size and partition each block alone over ``K / index_blocks`` clients (block 0 gives
            clients ``0 .. K/b - 1``, and so on). The official FLea code does this with 2 blocks for UCI-HAR
            with K = 150 and alpha <= 0.1 (its training file is ordered by subject, so the halves are not
            class-balanced); 1 (the default) partitions all samples at once.

    Returns:
        One sorted int64 index array per client.

    Raises:
        PartitionError: If alpha <= 0, ``min_size`` cannot be met (``K * min_size > N``, or no draw in
            ``max_tries`` met it; with the default, not even a size of 1), or K or the labels are invalid.
    """
    labels = check_common(labels, num_clients, num_classes)
    check_number("alpha", alpha, 0, low_open=True, error=PartitionError)
    check_int("max_tries", max_tries, 1, error=PartitionError)
    check_int("min_size", min_size, 0, allow_none=True, error=PartitionError)
    check_int("index_blocks", index_blocks, 1, error=PartitionError)
    if index_blocks > 1:
        return _by_blocks(
            labels, num_clients, num_classes, rng, index_blocks, alpha, min_size, balance, max_tries
        )
    if min_size is not None and min_size * num_clients > labels.size:
        raise PartitionError(
            f"min_size={min_size} cannot be met: {num_clients} clients x {min_size} > {labels.size} samples; "
            "use a smaller min_size or fewer clients"
        )
    target = default_min_size(labels.size, num_clients, num_classes) if min_size is None else min_size
    class_sizes = np.bincount(labels, minlength=num_classes)
    # Deviation from the official code: it retries without limit. On UCI-HAR with K = 75 and alpha = 0.1 only
    # about 1 draw in 30,000 gives every client >= 6 samples (its loop runs for minutes), so the default
    # target is relaxed by halving after max_tries misses; an explicit min_size stays strict.
    while True:
        counts, smallest = _search(class_sizes, num_clients, alpha, balance, target, max_tries, rng)
        tries = max_tries
        if counts is None and min_size is None and target <= 1:
            # Every client must hold a sample to train, so the last relaxed target keeps drawing: on UCI-HAR
            # with K = 150 and alpha = 0.1 about 1 draw in 1,900 gives every client a sample (1000 tries miss
            # it for some seeds). The extra draws come after the first max_tries, so every partition that
            # max_tries found is unchanged.
            extra = LAST_TARGET_TRIES * max_tries
            counts, smallest = _search(class_sizes, num_clients, alpha, balance, target, extra, rng)
            tries += extra
        if counts is not None:
            return _assign(labels, counts, rng)
        if min_size is not None or target <= 1:
            raise PartitionError(
                f"min_size={target} cannot be met with alpha={alpha} and {num_clients} clients: after "
                f"{tries} tries the smallest client still had {smallest} samples; use a smaller "
                "min_size, a larger alpha or fewer clients"
            )
        logger.info(
            "dirichlet(alpha=%s): no draw in %d gave every one of %d clients >= %d samples; relaxing to %d",
            alpha,
            max_tries,
            num_clients,
            target,
            target // 2,
        )
        target //= 2


def _by_blocks(
    labels: np.ndarray,
    num_clients: int,
    num_classes: int,
    rng: np.random.Generator,
    blocks: int,
    alpha: float,
    min_size: int | None,
    balance: bool,
    max_tries: int,
) -> list[np.ndarray]:
    """:func:`dirichlet` of each contiguous block of ``labels`` over its share of the clients, in block order
    (the official FLea code's UCI-HAR K = 150 split, ``index_blocks``)."""
    if num_clients % blocks:
        raise PartitionError(
            f"index_blocks={blocks} must divide the number of clients K={num_clients} "
            f"(each block goes to K/{blocks} clients)"
        )
    clients: list[np.ndarray] = []
    for block in np.array_split(np.arange(labels.size), blocks):
        parts = dirichlet(
            labels[block],
            num_clients=num_clients // blocks,
            num_classes=num_classes,
            rng=rng,
            alpha=alpha,
            min_size=min_size,
            balance=balance,
            max_tries=max_tries,
        )
        clients.extend(block[idx] for idx in parts)
    return clients


def _assign(labels: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Deals each class's shuffled samples out according to ``counts`` ``[C, K]``."""
    num_clients = counts.shape[1]
    owner = np.empty(labels.size, dtype=np.int64)
    for k, class_counts in enumerate(counts):
        idx = rng.permutation(np.flatnonzero(labels == k))
        owner[idx] = np.repeat(np.arange(num_clients), class_counts)
    return group_by_owner(owner, num_clients)
