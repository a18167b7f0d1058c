"""``method.share_dp`` for the methods that share rows computed from data (FLea, FedMix, FedBR, CCVR):
each client's ledger of how often each of its samples was released, the budget's gate, and the epsilon spent.

The mechanism and its accounting are :mod:`fedaug.privacy.gaussian`. A client's ledger is its own
bookkeeping: a count per local sample (int64, on the CPU). The simulation keeps every client's in
``ServerState.extra`` (``share_dp_counts``, so a checkpoint resumes it), hands each asked client its own in
the :class:`~fedaug.api.ShareRequest`, and takes back the updated one with the share; the rows shared never
depend on it except through the gate (a sample whose next release would exceed the budget is withheld).

Off (``method.share_dp`` at its defaults) nothing here runs and no key is added: runs equal those without
the option bit for bit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from fedaug.api import ClientContext, ClientShare, RunContext, ShareRequest
from fedaug.privacy.gaussian import GaussianShare, clip_rows, gaussian_noise
from fedaug.runtime.seeding import torch_generator
from fedaug.types import ClientId, Extra, Metrics

logger = logging.getLogger(__name__)

COUNTS = "share_dp_counts"
"""``ServerState.extra`` and ``ShareRequest.extra``: ``{client id: releases per local sample}``;
``ClientShare.extra``: the client's updated counts."""

STATS = "share_dp_stats"
"""``ServerState.extra``: the last share phase's numbers and which warnings were given."""


def attach(
    request: ShareRequest | None, extra: Mapping[str, Any], mech: GaussianShare | None, run: RunContext
) -> ShareRequest | None:
    """``request`` with the asked clients' ledgers (unchanged when off; None once the budget has stopped
    the sharing: :func:`receive` said so)."""
    if request is None or mech is None:
        return request
    if exhausted(extra, mech, run.num_clients):
        return None
    request.extra = request_extra(extra, request.client_ids)
    return request


def request_extra(extra: Mapping[str, Any], client_ids: Sequence[ClientId]) -> Extra:
    """What a share request carries for the asked clients: their ledgers (none the first time)."""
    ledger: dict[ClientId, Tensor] = extra.get(COUNTS, {})
    return {COUNTS: {c: ledger[c] for c in client_ids if c in ledger}}


def client_counts(request: ShareRequest, client_id: ClientId, num_examples: int) -> Tensor:
    """The client's ledger from the request (zeros before its first share)."""
    counts: Tensor | None = request.extra.get(COUNTS, {}).get(client_id)
    return torch.zeros(num_examples, dtype=torch.long) if counts is None else counts.clone()


def gate(idx: Tensor, counts: Tensor, mech: GaussianShare) -> tuple[Tensor, int]:
    """The drawn samples ``idx`` that may be released once more, and how many were withheld."""
    allowed = idx[counts[idx.cpu()].to(idx.device) < mech.max_releases]
    return allowed, int(idx.numel() - allowed.numel())


def noise_generator(ctx: ClientContext, round_num: int) -> torch.Generator:
    """The client's noise stream of a share phase (its own: the subset and batch streams are untouched)."""
    return torch_generator(ctx.run.seed, "share-dp", round_num, ctx.client_id)


def privatise(rows: Tensor, clip: float, std: float, generator: torch.Generator) -> Tensor:
    """Each row clipped to L2 norm ``clip``, plus Gaussian noise of std ``std``."""
    clipped = clip_rows(rows, clip)
    return clipped + gaussian_noise(tuple(clipped.shape), std, generator, clipped)


def group_means(
    request: ShareRequest, ctx: ClientContext, mech: GaussianShare, group: int
) -> tuple[Tensor, Tensor, Extra, Metrics]:
    """FedMix's and FedBR's private share: the averages of shuffled groups of ``group`` clipped inputs, over
    the samples the budget still allows (each in one group at most: one release), plus noise of std
    ``noise_multiplier * clip / group`` (an average moves by at most ``2 clip / group`` when one of its
    samples is replaced).

    Returns:
        ``(averages [G, ...], the samples averaged [G * group] in group order, the share's ledger extra,
        its metrics with num_shared)``.
    """
    order = torch.randperm(ctx.data.num_examples, generator=ctx.generator)
    counts = client_counts(request, ctx.client_id, ctx.data.num_examples)
    allowed, _ = gate(order, counts, mech)
    count = allowed.shape[0] // group
    used = allowed[: count * group]
    x = clip_rows(ctx.data.x[used].float(), mech.clip)
    x_bar = x.view(count, group, *x.shape[1:]).mean(dim=1)
    noise = noise_generator(ctx, request.round_num)
    x_bar = x_bar + gaussian_noise(
        tuple(x_bar.shape), mech.noise_multiplier * mech.clip / group, noise, x_bar
    )
    dp_extra, dp_metrics = share_extra(counts, used, ctx.data.num_examples - allowed.shape[0])
    return x_bar, used, dp_extra, {"num_shared": float(count), **dp_metrics}


def share_extra(counts: Tensor, released: Tensor, withheld: int) -> tuple[Extra, Metrics]:
    """The ledger after releasing ``released`` once each (for the share's extra) and the share's metrics."""
    counts = counts.clone()
    counts[released.cpu()] += 1
    return {COUNTS: counts}, {"share_dp_withheld": float(withheld)}


def receive(
    extra: Mapping[str, Any],
    shares: Sequence[ClientShare],
    mech: GaussianShare,
    *,
    round_num: int,
    num_clients: int,
    shares_again: bool = True,
) -> Extra:
    """The server state's ledger and stats after a share phase; logs the epsilon spent, and a WARNING when
    the budget first withholds samples and (for a method that ``shares_again``: FLea, not FedMix's one share)
    when it has stopped the sharing."""
    ledger: dict[ClientId, Tensor] = dict(extra.get(COUNTS, {}))
    for share in shares:
        if COUNTS in share.extra:
            ledger[share.client_id] = share.extra[COUNTS].cpu()
    stats: dict[str, float] = dict(extra.get(STATS, {}))
    withheld = sum(s.metrics.get("share_dp_withheld", 0.0) for s in shares)
    most = max((int(c.max()) for c in ledger.values() if c.numel()), default=0)
    stats.update(withheld=withheld, most_releases=float(most), epsilon=mech.spent(most))
    logger.info(
        "share_dp: epsilon %.4g spent at delta %g after round %d (most releases of one sample: %d)",
        stats["epsilon"],
        mech.delta,
        round_num,
        most,
    )
    if withheld and not stats.get("warned_withheld"):
        stats["warned_withheld"] = 1.0
        logger.warning(
            "share_dp: %d samples drawn in round %d have spent the budget (epsilon %g at delta %g: %d "
            "releases each) and were not shared; such samples are withheld from now on",
            int(withheld),
            round_num,
            mech.epsilon,
            mech.delta,
            mech.max_releases,
        )
    new = {**extra, COUNTS: ledger, STATS: stats}
    if shares_again and exhausted(new, mech, num_clients) and not stats.get("warned_stopped"):
        stats["warned_stopped"] = 1.0
        logger.warning(
            "share_dp: the budget (epsilon %g at delta %g) is spent for every sample of every client after "
            "round %d: sharing stops; the run goes on",
            mech.epsilon,
            mech.delta,
            round_num,
        )
    return new


def exhausted(extra: Mapping[str, Any], mech: GaussianShare, num_clients: int) -> bool:
    """Whether no sample may be released again: the budget allows none, or every client's ledger is full."""
    if mech.max_releases == 0:
        return True
    ledger: dict[ClientId, Tensor] = extra.get(COUNTS, {})
    return len(ledger) == num_clients and all(bool((c >= mech.max_releases).all()) for c in ledger.values())


def warn_if_nothing_allowed(mech: GaussianShare) -> None:
    """The WARNING for a budget that one release already exceeds (nothing will be shared)."""
    if mech.max_releases == 0:
        logger.warning(
            "share_dp: one release at noise_multiplier %g spends epsilon %.4g > the budget %g at delta %g: "
            "nothing will be shared; the run goes on",
            mech.noise_multiplier,
            mech.spent(1),
            mech.epsilon,
            mech.delta,
        )


def round_metrics(extra: Mapping[str, Any], mech: GaussianShare | None) -> Metrics:
    """``share_dp/epsilon`` (spent so far, at ``share_dp/delta``), the most releases of one sample, the
    samples the budget withheld in the last share phase and the noise multiplier; nothing when off."""
    if mech is None:
        return {}
    stats = extra.get(STATS, {})
    return {
        "share_dp/epsilon": float(stats.get("epsilon", 0.0)),
        "share_dp/delta": mech.delta,
        "share_dp/noise_multiplier": mech.noise_multiplier,
        "share_dp/most_releases": float(stats.get("most_releases", 0.0)),
        "share_dp/withheld": float(stats.get("withheld", 0.0)),
    }
