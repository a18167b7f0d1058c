"""The one-off shared pool of FedData and FedMix: every client shares once before training, all receive it.

Both baselines follow the same protocol (FLea papers, appendix C.3: "the server waits until all the clients
have shared"): in the share phase before round 1 (``round_num = 0``) every client sends something derived from
its raw data (FedData: a fraction of raw samples; FedMix: averages of groups of samples), the server
concatenates the answers into a pool held in ``ServerState.extra`` (``pool_x``, ``pool_y``), and every client
receives the whole pool with the model in each round's payload. The pool never changes afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor

from fedaug.api import ClientShare, Payload, RunContext, ServerState, ShareRequest, TrainSettings
from fedaug.methods.flea_buffer import exposure_update
from fedaug.types import Extra, Metrics


def empty_pool(
    sample_shape: tuple[int, ...],
    label_shape: tuple[int, ...],
    label_dtype: torch.dtype,
    *,
    device: torch.device,
) -> Extra:
    """The server's extra state before sharing: an empty pool on ``device`` (the run's) and zeroed
    bookkeeping."""
    return {
        "pool_x": torch.empty(0, *sample_shape, device=device),
        "pool_y": torch.empty(0, *label_shape, dtype=label_dtype, device=device),
        "exposure": 0.0,
        "bytes_up_per_client": 0.0,
    }


def pool_request(state: ServerState, round_num: int, run: RunContext) -> ShareRequest | None:
    """Asks every client (not only a round's participants) to share, once, before training."""
    if round_num != 0:
        return None
    return ShareRequest(round_num=0, client_ids=list(range(run.num_clients)), model_state=state.model_state)


def pool_payload(state: ServerState, round_num: int, train: TrainSettings) -> Payload:
    """The round's broadcast: the global weights plus the whole pool."""
    extra = {"pool_x": state.extra["pool_x"], "pool_y": state.extra["pool_y"]}
    return Payload(round_num=round_num, model_state=state.model_state, train=train, extra=extra)


def receive_pool(state: ServerState, shares: Sequence[ClientShare], run: RunContext) -> ServerState:
    """Concatenates the shares (``extra["x"]``, ``extra["y"]``) into the pool and records its cost.

    Exposure uses FLea's definition (docs/methods/flea.md; xi_ij = 1 once data of i reached j): every client
    that shared something reaches every client, so it is 1.0 when every client shares at least one item. The
    pool lives on the run's device, as the empty one :func:`empty_pool` made (the clients' shares are computed
    there).
    """
    extra = dict(state.extra)
    parts = [s for s in shares if s.extra["y"].shape[0] > 0]
    extra["pool_x"] = torch.cat([extra["pool_x"], *[s.extra["x"].to(run.device) for s in parts]])
    extra["pool_y"] = torch.cat([extra["pool_y"], *[s.extra["y"].to(run.device) for s in parts]])
    sources = torch.tensor([s.client_id for s in parts], dtype=torch.long)
    pairs = exposure_update(
        torch.empty(0, dtype=torch.long), sources, range(run.num_clients), run.num_clients
    )
    extra["exposure"] = pairs.numel() / run.num_clients**2
    uploaded = sum(_nbytes(s.extra["x"]) + _nbytes(s.extra["y"]) for s in shares)
    extra["bytes_up_per_client"] = uploaded / max(len(shares), 1)
    return replace(state, extra=extra)


def pool_metrics(prefix: str, extra: Extra) -> Metrics:
    """Pool size, exposure, and the one-off traffic: bytes each client uploads and downloads (the pool)."""
    return {
        f"{prefix}/pool_size": float(extra["pool_y"].shape[0]),
        f"{prefix}/exposure": float(extra["exposure"]),
        f"{prefix}/bytes_up_per_client": float(extra["bytes_up_per_client"]),
        f"{prefix}/bytes_down_per_client": float(_nbytes(extra["pool_x"]) + _nbytes(extra["pool_y"])),
    }


def _nbytes(tensor: Tensor) -> int:
    return tensor.numel() * tensor.element_size()
