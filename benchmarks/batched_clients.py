"""Batched clients vs the sequential loop, side by side in one process, on one round of a preset.

Prepares the preset, builds the contexts of round 1's clients, and alternately times the sequential client
updates (``method.client_update`` per client, as the engine runs them) and
:func:`fedaug.engine.batched.stacked.train_round_batched` on the same contexts, in interleaved repeats. Also
reports
the largest parameter difference between the two. Writes JSON.

Usage::

    python benchmarks/batched_clients.py                                   # BN CNN and MLP on Fashion-MNIST
    python benchmarks/batched_clients.py --set model.name=mlp --out benchmarks/results/x.json
    python benchmarks/batched_clients.py --device cuda --out /tmp/batched_cuda.json
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch

from fedaug.config.load import load_config
from fedaug.engine.batched.stacked import train_round_batched
from fedaug.engine.sampling import sample_clients
from fedaug.engine.simulation import Simulation, round_train_settings
from fedaug.runs.runner import prepare
from fedaug.training.loop import snapshot_state
from machine import (  # benchmarks/ is the script's directory
    add_device_argument,
    benchmark_device,
    clock,
    machine_facts,
    write_report,
)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def round_one(configs: list[str], overrides: list[str]) -> tuple[Any, Any, Any, Simulation, Any, list[int]]:
    """A preset's config, prepared run, method, simulation, round-1 payload and round-1 clients, on the
    config's ``engine.device`` (the initial model built on the CPU, then moved)."""
    config = load_config(configs, [*overrides, "engine.progress=false"])
    with tempfile.TemporaryDirectory() as tmp:
        prepared = prepare(config, Path(tmp))
    spec, method = prepared.spec, prepared.method
    torch.manual_seed(0)
    initial = snapshot_state(spec.model_fn().to(spec.run.device))
    train = round_train_settings(spec.train_settings, spec.precision, 1)
    payload = method.payload(method.init_server(initial, spec.run), 1, train)
    clients = sample_clients(spec.run.seed, 1, spec.run.num_clients, spec.clients_per_round)
    return config, prepared, method, Simulation(spec), payload, list(clients)


def bench(configs: list[str], overrides: list[str], repeats: int) -> dict[str, Any]:
    config, prepared, method, sim, payload, clients = round_one(configs, overrides)
    spec, device = prepared.spec, prepared.spec.run.device

    def contexts() -> list[Any]:  # fresh generators every time: both paths see the same batches
        return [sim._client_context(c, 1, "client") for c in clients]

    times: dict[str, list[float]] = {"sequential": [], "batched": []}
    results: dict[str, Any] = {}
    for _ in range(repeats + 1):  # the first repeat warms up both paths and is dropped
        for mode in times:
            ctxs = contexts()
            start = clock(device)
            if mode == "sequential":
                results[mode] = [method.client_update(payload, ctx) for ctx in ctxs]
            else:
                results[mode] = train_round_batched(method, payload, ctxs)
            times[mode].append(clock(device) - start)
    diff = max(
        float((a.model_state[k].float() - b.model_state[k].float()).abs().max())
        for a, b in zip(results["sequential"], results["batched"], strict=True)
        for k in a.model_state
        if not k.endswith("bias") and not k.endswith("running_mean")
    )
    med = {mode: statistics.median(t[1:]) for mode, t in times.items()}
    steps = int(sum(u.metrics["train/steps"] for u in results["sequential"]))
    return {
        "model": config.model.name,
        "dataset_source": prepared.dataset.source,
        "clients": len(clients),
        "client_sizes": sorted({spec.run.client_sizes[c] for c in clients}),
        "local_epochs": config.train.local_epochs,
        "client_steps": steps,
        "seconds": med,
        "ms_per_client_step": {mode: 1000 * t / steps for mode, t in med.items()},
        "speedup": med["sequential"] / med["batched"],
        "max_abs_param_diff_excluding_biases_and_running_means": diff,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "configs", nargs="*", default=[str(REPO / "benchmarks" / "presets" / "fmnist_bncnn.yaml")]
    )
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--models", nargs="+", default=["bn_cnn_mnist", "mlp"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "batched_clients.json"))
    add_device_argument(parser)
    args = parser.parse_args()
    device = benchmark_device(args.device)
    torch.set_num_threads(args.threads)
    data = [f"data.data_dir={SHARED_DATA}"] if (SHARED_DATA / "fashion_mnist").is_dir() else []
    on = f"engine.device={device}"  # after --set: --device decides
    result = {
        "threads": torch.get_num_threads(),
        "note": "medians of interleaved repeats in one process; the machine may be shared (see loadavg)",
        **machine_facts(device),
        "models": {
            name: bench(args.configs, [*data, *args.overrides, on, f"model.name={name}"], args.repeats)
            for name in args.models
        },
    }
    write_report(args.out, result, echo=True)


if __name__ == "__main__":
    main()
