"""FedYogi: Reddi et al.'s adaptive server step with Yogi's second moment.

Adaptive Federated Optimization. S. J. Reddi, Z. Charles, M. Zaheer, Z. Garrett, K. Rush, J. Konečný,
S. Kumar, H. B. McMahan. ICLR 2021. arXiv:2003.00295. Algorithm 2, FedYogi:
``v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)``; the rest is FedAdam's
(:mod:`fedaug.methods.fedadam`, where the shared step, its defaults and its departures from the paper are).

# Deviation from paper: as FedAdam's (size-weighted mean of the clients, BN statistics averaged, the FLea
# protocol's Adam clients).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedaug.methods.fedadam import AdaptiveServer, FedAdamConfig
from fedaug.registry import register


@dataclass(frozen=True)
class FedYogiConfig(FedAdamConfig):
    """FedYogi's hyper-parameters (FedAdam's defaults).

    Attributes:
        server_lr: server learning rate eta (> 0; default 0.01; the paper tunes it per task on a log10 grid).
        tau: adaptivity tau, added to sqrt(v) and squared as v's start
            (> 0; default 0.001; the paper tunes it per task on a log10 grid).
        beta1: decay of the first moment (in [0, 1); default 0.9, the paper's).
        beta2: the second moment's rate (in [0, 1); default 0.99, the paper's).
    """


@register(
    "method",
    "fedyogi",
    summary="FedAvg's clients; the server steps with Yogi on the clients' mean update",
    paper="Reddi et al., ICLR 2021",
)
class FedYogi(AdaptiveServer):
    """FedYogi: ``v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)``."""

    name = "fedyogi"
    config_cls = FedYogiConfig
    config: FedYogiConfig

    def second_moment(self, v: torch.Tensor, delta_sq: torch.Tensor) -> torch.Tensor:
        return v - (1 - self.config.beta2) * delta_sq * torch.sign(v - delta_sq)
