"""FedAdagrad: Reddi et al.'s adaptive server step with Adagrad's second moment.

Adaptive Federated Optimization. S. J. Reddi, Z. Charles, M. Zaheer, Z. Garrett, K. Rush, J. Konečný,
S. Kumar, H. B. McMahan. ICLR 2021. arXiv:2003.00295. Algorithm 2, FedAdagrad: ``v_t = v_{t-1} +
Delta_t^2``; the rest is FedAdam's (:mod:`fedaug.methods.fedadam`, where the shared step and its departures
from the paper are).

# Deviation from paper: as FedAdam's (size-weighted mean of the clients, BN statistics averaged, the FLea
# protocol's Adam clients).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedaug.api import MethodConfig
from fedaug.methods.fedadam import AdaptiveServer
from fedaug.methods.parts.checks import check_in_range, check_positive
from fedaug.registry import register


@dataclass(frozen=True)
class FedAdagradConfig(MethodConfig):
    """FedAdagrad's hyper-parameters.

    Attributes:
        server_lr: server learning rate eta (> 0; default 0.1; the paper tunes it per task on a log10 grid).
        tau: adaptivity tau, added to sqrt(v) and squared as v's start
            (> 0; default 0.01; the paper tunes it per task on a log10 grid).
        beta1: decay of the first moment (in [0, 1); default 0.9, the paper's).
    """

    server_lr: float = 0.1
    tau: float = 1e-2
    beta1: float = 0.9

    def __post_init__(self) -> None:
        check_positive(self, ("server_lr", "tau"))
        check_in_range(self, ("beta1",), 0.0, 1.0, high_open=True)


@register(
    "method",
    "fedadagrad",
    summary="FedAvg's clients; the server steps with Adagrad on the clients' mean update",
    paper="Reddi et al., ICLR 2021",
)
class FedAdagrad(AdaptiveServer):
    """FedAdagrad: ``v_t = v_{t-1} + Delta_t^2``."""

    name = "fedadagrad"
    config_cls = FedAdagradConfig
    config: FedAdagradConfig

    def second_moment(self, v: torch.Tensor, delta_sq: torch.Tensor) -> torch.Tensor:
        return v + delta_sq
