"""The one-off shared pool of FedData and FedMix: every client shares once before training, all receive it.

Both baselines follow the same protocol (FLea papers, appendix C.3: "the server waits until all the clients
have shared"): in the share phase before round 1 (``round_num = 0``) every client sends something derived from
its raw data (FedData: a fraction of raw samples; FedMix: averages of groups of samples), the server
concatenates the answers into a pool held in ``ServerState.extra`` (:class:`PoolState`), and every client
receives the whole pool (:class:`DataPool`) with the model in each round's payload. The pool never changes
afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from fedaug.api import ClientShare, Payload, RunContext, ServerState, ShareRequest, TrainSettings
from fedaug.methods.flea.buffer import exposure_update
from fedaug.methods.parts.payloads import SharedSamples, read_extra
from fedaug.types import Extra, Metrics

_OWNER = "the shared data pool (feddata, fedmix, fedbr)"


@dataclass(frozen=True)
class DataPool:
    """The pool every client receives with the model (``Payload.extra``: ``pool_x``, ``pool_y``).

    Attributes:
        x: the pooled samples (FedData: raw; FedMix, FedBR: group means), ``[P, ...]``.
        y: their labels: class ids ``[P]`` (FedData) or label distributions ``[P, num_classes]``.
    """

    x: Tensor
    y: Tensor

    def to_extra(self) -> Extra:
        return {"pool_x": self.x, "pool_y": self.y}

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any]) -> DataPool:
        return cls(read_extra(extra, "pool_x", _OWNER), read_extra(extra, "pool_y", _OWNER))


@dataclass(frozen=True)
class PoolState:
    """The server's ``ServerState.extra``: the pool and what sharing it cost.

    Attributes:
        pool: the pool (``pool_x``, ``pool_y``).
        exposure: FLea's feature exposure eps after the share phase (``exposure``; 1.0 once everyone shared).
        bytes_up_per_client: bytes each client uploaded once, on average (``bytes_up_per_client``).
    """

    pool: DataPool
    exposure: float
    bytes_up_per_client: float

    def to_extra(self) -> Extra:
        extra = self.pool.to_extra()
        return {**extra, "exposure": self.exposure, "bytes_up_per_client": self.bytes_up_per_client}

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any]) -> PoolState:
        exposure = read_extra(extra, "exposure", _OWNER)
        return cls(DataPool.from_extra(extra), exposure, read_extra(extra, "bytes_up_per_client", _OWNER))


def empty_pool(
    sample_shape: tuple[int, ...],
    label_shape: tuple[int, ...],
    label_dtype: torch.dtype,
    *,
    device: torch.device,
) -> Extra:
    """The server's extra state before sharing: an empty pool on ``device`` (the run's) and zeroed
    bookkeeping."""
    x = torch.empty(0, *sample_shape, device=device)
    pool = DataPool(x, torch.empty(0, *label_shape, dtype=label_dtype, device=device))
    return PoolState(pool, exposure=0.0, bytes_up_per_client=0.0).to_extra()


def pool_request(state: ServerState, round_num: int, run: RunContext) -> ShareRequest | None:
    """Asks every client (not only a round's participants) to share, once, before training."""
    if round_num != 0:
        return None
    return ShareRequest(round_num=0, client_ids=list(range(run.num_clients)), model_state=state.model_state)


def pool_payload(state: ServerState, round_num: int, train: TrainSettings) -> Payload:
    """The round's broadcast: the global weights plus the whole pool."""
    extra = DataPool.from_extra(state.extra).to_extra()
    return Payload(round_num=round_num, model_state=state.model_state, train=train, extra=extra)


def receive_pool(state: ServerState, shares: Sequence[ClientShare], run: RunContext) -> ServerState:
    """Concatenates the shares (:class:`~fedaug.methods.parts.payloads.SharedSamples`) into the pool and
    records
    its cost.

    Exposure uses FLea's definition (docs/methods/flea.md; xi_ij = 1 once data of i reached j): every client
    that shared something reaches every client, so it is 1.0 when every client shares at least one item. The
    pool lives on the run's device, as the empty one :func:`empty_pool` made (the clients' shares are computed
    there).
    """
    pool = DataPool.from_extra(state.extra)
    sent = [(s.client_id, SharedSamples.from_extra(s.extra)) for s in shares]
    parts = [(client, samples) for client, samples in sent if samples.y.shape[0] > 0]
    pool_x = torch.cat([pool.x, *[samples.x.to(run.device) for _, samples in parts]])
    pool_y = torch.cat([pool.y, *[samples.y.to(run.device) for _, samples in parts]])
    sources = torch.tensor([client for client, _ in parts], dtype=torch.long)
    pairs = exposure_update(
        torch.empty(0, dtype=torch.long), sources, range(run.num_clients), run.num_clients
    )
    uploaded = sum(_nbytes(samples.x) + _nbytes(samples.y) for _, samples in sent)
    new = PoolState(
        DataPool(pool_x, pool_y),
        exposure=pairs.numel() / run.num_clients**2,
        bytes_up_per_client=uploaded / max(len(shares), 1),
    )
    return replace(state, extra={**state.extra, **new.to_extra()})


def pool_metrics(prefix: str, extra: Extra) -> Metrics:
    """Pool size, exposure, and the one-off traffic: bytes each client uploads and downloads (the pool)."""
    pooled = PoolState.from_extra(extra)
    return {
        f"{prefix}/pool_size": float(pooled.pool.y.shape[0]),
        f"{prefix}/exposure": float(pooled.exposure),
        f"{prefix}/bytes_up_per_client": float(pooled.bytes_up_per_client),
        f"{prefix}/bytes_down_per_client": float(_nbytes(pooled.pool.x) + _nbytes(pooled.pool.y)),
    }


def _nbytes(tensor: Tensor) -> int:
    return tensor.numel() * tensor.element_size()
