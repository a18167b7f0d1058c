"""``fedaug flower simulate``: an experiment in Flower's simulation runtime (Ray; one node per client).

The ServerApp (:mod:`fedaug.flower.server_app`) runs in this process and drives the engine's round loop;
the ClientApp (:mod:`fedaug.flower.client_app`) runs in Ray actors, one Flower SuperNode per client
(``partition-id`` = client id). Methods compared on one setting (``compare:``) run one after the other in
the same simulation, so Ray starts once.

Flower 1.41 marks ``run_simulation`` deprecated in favour of ``flwr run`` against a simulation SuperLink; it
is still the one in-process entry point, and it drives the same simulation runtime.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from flwr.simulation import run_simulation

from fedaug.experiments.config import ExperimentConfig
from fedaug.flower.client_app import app as client_app
from fedaug.flower.server_app import make_server_app

logger = logging.getLogger(__name__)


def simulate(
    configs: Sequence[ExperimentConfig],
    *,
    fresh: bool = False,
    num_cpus: int | None = None,
    cpus_per_client: float = 1.0,
    node_timeout: float = 300.0,
) -> list[dict[str, Any]]:
    """Runs ``configs`` (same data and partition) in Flower's simulation; returns their summaries.

    Args:
        configs: experiments on one setting (e.g. the methods of a ``compare:`` list).
        fresh: discard existing run directories first.
        num_cpus: CPUs Ray may use (None: all); with ``cpus_per_client`` it sets how many clients train
            at the same time.
        cpus_per_client: CPUs reserved per ClientApp (Flower's ``client_resources.num_cpus``).
        node_timeout: seconds the ServerApp waits for the simulated SuperNodes (they register once Ray has
            started, which took over 120 s on a loaded 2-core machine; the bound ends the ServerApp's thread
            when Flower's runtime fails to start, e.g. Ray timing out).
    """
    from fedaug.experiments.runner import load_data_and_partition

    _, partition = load_data_and_partition(configs[0])
    num_clients = len(partition.train_indices)
    server_app, outcome = make_server_app(configs, fresh=fresh, node_timeout=node_timeout)
    init_args: dict[str, Any] = {} if num_cpus is None else {"num_cpus": num_cpus}
    backend_config: Any = {"client_resources": {"num_cpus": cpus_per_client}, "init_args": init_args}
    logger.info("Flower simulation: %d SuperNodes, %s", num_clients, backend_config)
    # Ray's coming default (it warns with a FutureWarning otherwise): it leaves CUDA_VISIBLE_DEVICES alone in
    # actors without GPUs. fedaug's clients never use a GPU, so the choice does not change a run.
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=num_clients,
        backend_config=backend_config,
    )
    if outcome.error is not None:
        raise outcome.error
    if len(outcome.summaries) != len(configs):
        raise RuntimeError("Flower's simulation ended before the ServerApp finished (see its log above)")
    return outcome.summaries
