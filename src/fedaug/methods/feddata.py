"""FedData: every client shares a fraction of its raw data once; everyone trains on local + shared data.

Federated Learning with Non-IID Data. Y. Zhao, M. Li, L. Lai, N. Suda, D. Civin, V. Chandra. arXiv preprint,
2018. arXiv:1806.00582. (The FLea papers name this baseline "FedData" and use it as an upper bound that gives
up privacy; KDD 2024 appendix C.3.)

Differences from FedAvg. Before round 1 every client sends ``share_fraction`` (10%) of its raw samples with
their labels to the server, which pools them and sends the pool to every client with the model (once, in
principle; the in-process engine just hands the same tensors to every round's payload). Each client then runs
FedAvg's local training on the union of its own data and the whole pool; aggregation keeps FedAvg's weights by
the original local sizes. ``share_fraction = 0`` is exactly FedAvg.

# Deviation from paper: Zhao et al. distribute a globally shared subset G held by the server (a fraction
# beta of G goes to each client); we follow the FLea papers' version, where the pool is collected from the
# clients (the official FLea code's ``Data_pre``), and every client gets all of it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from fedaug.api import (
    ClientContext,
    ClientData,
    ClientShare,
    MethodConfig,
    Payload,
    RunContext,
    ServerState,
    ShareRequest,
    TrainSettings,
)
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.flea.buffer import share_indices
from fedaug.methods.parts import data_pool
from fedaug.methods.parts.checks import check_in_range
from fedaug.methods.parts.payloads import SharedSamples
from fedaug.registry import register
from fedaug.types import ClientId, Metrics

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FedDataConfig(MethodConfig):
    """FedData's hyper-parameter.

    Attributes:
        share_fraction: fraction of each client's samples shared once before training (FLea papers: 0.1;
            rounded down, so clients with fewer than 1 / share_fraction samples share nothing). 0 is FedAvg.
    """

    share_fraction: float = 0.1

    def __post_init__(self) -> None:
        check_in_range(self, ("share_fraction",), 0, 1)


@register(
    "method",
    "feddata",
    summary="every client shares 10% of its raw data once; all train on local + shared data (an upper bound)",
    paper="Zhao et al., arXiv 2018",
)
class FedData(FedAvg):
    """FedData (the FLea papers' upper-bound baseline).

    Client: in the pre-training share phase, sends a random ``share_fraction`` of its raw samples (without
    replacement); in every round, trains with cross-entropy on its local data concatenated with the received
    pool (which includes its own shared samples, as in the official code). Reports its local size, so
    aggregation weights stay the original n_k (as the official code).
    Server: pools the shared samples once; FedAvg aggregation. Logs ``feddata/exposure`` (1.0 once everyone
    shared), the pool size and the bytes each client uploads and downloads once.
    """

    name = "feddata"
    config_cls = FedDataConfig
    config: FedDataConfig

    def __init__(self, config: FedDataConfig | None = None) -> None:
        super().__init__(config)
        if self.config.share_fraction == 0:
            logger.warning("feddata with share_fraction=0 is plain FedAvg (nothing is shared)")

    def init_server(self, model_state: dict[str, Tensor], run: RunContext) -> ServerState:
        extra = data_pool.empty_pool(run.input_shape, (), torch.long, device=run.device)
        return ServerState(round_num=0, model_state=model_state, extra=extra)

    def payload(self, state: ServerState, round_num: int, train: TrainSettings) -> Payload:
        return data_pool.pool_payload(state, round_num, train)

    def training_data(self, payload: Payload, ctx: ClientContext) -> ClientData:
        """Local + pool: FedAvg's local training on their union (one training loop; only the data changes),
        aggregated by the local size."""
        pool = data_pool.DataPool.from_extra(payload.extra)
        local = ctx.data
        return ClientData(
            local.client_id,
            torch.cat([local.x, pool.x.to(local.x)]),
            torch.cat([local.y, pool.y.to(local.y.device)]),
            local.num_classes,
        )

    def share_request(
        self, state: ServerState, *, round_num: int, participants: Sequence[ClientId], run: RunContext
    ) -> ShareRequest | None:
        del participants
        if self.config.share_fraction == 0:
            return None
        return data_pool.pool_request(state, round_num, run)

    def client_share(self, request: ShareRequest, ctx: ClientContext) -> ClientShare:
        # Paper is silent on rounding: floor, as the official code; drawn without replacement (the official
        # code draws with replacement, which can share a sample twice).
        idx = share_indices(
            ctx.data.num_examples, self.config.share_fraction, ctx.generator, None, ctx.client_id
        )
        x, y = ctx.data.x[idx], ctx.data.y[idx]
        shared = SharedSamples(x, y)
        return ClientShare(ctx.client_id, extra=shared.to_extra(), metrics={"num_shared": float(len(idx))})

    def receive_shares(
        self, state: ServerState, shares: Sequence[ClientShare], run: RunContext
    ) -> ServerState:
        return data_pool.receive_pool(state, shares, run)

    def round_metrics(self, state: ServerState) -> Metrics:
        return data_pool.pool_metrics("feddata", state.extra)
