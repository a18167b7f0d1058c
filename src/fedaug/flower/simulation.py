"""``fedaug flower simulate``: an experiment in Flower's simulation runtime (Ray; one node per client).

The ServerApp (:mod:`fedaug.flower.server_app`) runs in this process and drives the engine's round loop;
the ClientApp (:mod:`fedaug.flower.client_app`) runs in Ray actors, one Flower SuperNode per client
(``partition-id`` = client id). Methods compared on one setting (``compare:``) run one after the other in
the same simulation, so Ray starts once.

Devices: the ServerApp computes on ``engine.device`` in this process; each ClientApp resolves it in its actor.
Ray leaves the GPUs visible to actors that reserve none (``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0``, Ray's
coming default), so with ``engine.device: auto`` the clients train on the machine's GPU either way;
``--gpus-per-client g`` (Flower's ``client_resources.num_gpus``) makes Ray count it: an actor gets a share
``g`` of one GPU (``CUDA_VISIBLE_DEVICES`` set to it), so at most ``1/g`` clients train on one GPU at a time
(and Ray spreads them over several GPUs; an actor sees only its own GPU, as ``cuda:0``, so name ``auto`` or
``cuda`` there, not ``cuda:N``). ``engine.device: cpu`` keeps every client on the CPU.

Flower 1.41 marks ``run_simulation`` deprecated in favour of ``flwr run`` against a simulation SuperLink; it
is still the one in-process entry point, and it drives the same simulation runtime.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import torch
from flwr.simulation import run_simulation

from fedaug.config.schema import ExperimentConfig
from fedaug.errors import ConfigError
from fedaug.flower.client_app import app as client_app
from fedaug.flower.server_app import make_server_app
from fedaug.runtime import startup
from fedaug.runtime.device import resolve_device
from fedaug.validation import check_int, check_number

logger = logging.getLogger(__name__)


def backend_config(
    *, num_cpus: int | None = None, cpus_per_client: float = 1.0, gpus_per_client: float = 0.0
) -> dict[str, Any]:
    """Flower's Ray backend config: each ClientApp's resources (``num_cpus``, ``num_gpus``) and Ray's
    ``init_args`` (``num_cpus``: CPUs Ray may use, None: all).

    Raises:
        ConfigError: ``cpus_per_client`` not > 0, ``gpus_per_client`` not >= 0, or ``num_cpus`` not >= 1.
    """
    check_number("--cpus-per-client", cpus_per_client, 0, low_open=True)
    check_number("--gpus-per-client", gpus_per_client, 0)
    check_int("--num-cpus", num_cpus, 1, allow_none=True)
    init_args: dict[str, Any] = {} if num_cpus is None else {"num_cpus": num_cpus}
    resources = {"num_cpus": cpus_per_client, "num_gpus": gpus_per_client}
    return {"client_resources": resources, "init_args": init_args}


def check_devices(configs: Sequence[ExperimentConfig], gpus_per_client: float) -> torch.device:
    """The ServerApp's device (``engine.device`` resolved here), checked before Ray starts.

    Raises:
        DeviceError: ``engine.device`` names a device this machine does not have.
        ConfigError: ``gpus_per_client > 0`` on a machine without a CUDA GPU (Ray could place no client).
    """
    devices = [resolve_device(config.engine.device) for config in configs]
    if gpus_per_client > 0 and not torch.cuda.is_available():
        raise ConfigError(
            f"--gpus-per-client {gpus_per_client:g} but this machine has no CUDA device (available: cpu); "
            "leave it at 0"
        )
    if gpus_per_client > 0 and devices[0].type == "cpu":
        logger.warning(
            "--gpus-per-client %g reserves GPU shares for clients that run on the CPU", gpus_per_client
        )
    return devices[0]


def simulate(
    configs: Sequence[ExperimentConfig],
    *,
    fresh: bool = False,
    num_cpus: int | None = None,
    cpus_per_client: float = 1.0,
    gpus_per_client: float = 0.0,
    node_timeout: float = 300.0,
) -> list[dict[str, Any]]:
    """Runs ``configs`` (same data and partition) in Flower's simulation; returns their summaries.

    Args:
        configs: experiments on one setting (e.g. the methods of a ``compare:`` list).
        fresh: discard existing run directories first.
        num_cpus: CPUs Ray may use (None: all); with ``cpus_per_client`` it sets how many clients train
            at the same time.
        cpus_per_client: CPUs reserved per ClientApp (Flower's ``client_resources.num_cpus``).
        gpus_per_client: share of a GPU reserved per ClientApp (``client_resources.num_gpus``; 0: none
            reserved, see the module docstring).
        node_timeout: seconds the ServerApp waits for the simulated SuperNodes (they register once Ray has
            started, which took over 120 s on a loaded 2-core machine; the bound ends the ServerApp's thread
            when Flower's runtime fails to start, e.g. Ray timing out).
    """
    from fedaug.runs.resolve import load_data_and_partition

    backend = backend_config(
        num_cpus=num_cpus, cpus_per_client=cpus_per_client, gpus_per_client=gpus_per_client
    )
    device = check_devices(configs, gpus_per_client)
    _, partition = load_data_and_partition(configs[0])
    num_clients = len(partition.train_indices)
    server_app, outcome = make_server_app(configs, fresh=fresh, node_timeout=node_timeout)
    logger.info("Flower simulation: %d SuperNodes, server on %s, %s", num_clients, device, backend)
    startup.mark("flower_setup")  # the devices checked, the data loaded, the ServerApp made
    # Ray's coming default (it warns with a FutureWarning otherwise): it leaves CUDA_VISIBLE_DEVICES alone in
    # actors that reserve no GPU, so engine.device (auto, cuda) means the same in an actor as in this process.
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=num_clients,
        backend_config=backend,
    )
    if outcome.error is not None:
        raise outcome.error
    if len(outcome.summaries) != len(configs):
        raise RuntimeError("Flower's simulation ended before the ServerApp finished (see its log above)")
    return outcome.summaries
