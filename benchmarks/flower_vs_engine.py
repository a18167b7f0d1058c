"""Time per round: Flower's simulation runtime versus the in-process engine, same config, same machine.

Runs each method of the preset for a few rounds on the engine and the same configs in Flower's simulation
(Ray, one SuperNode per client, ``--num-cpus`` actors; 1 by default, so clients train one after the other as
in the engine); ``--repeats`` alternates the order (engine then Flower, Flower then engine, ...) so that a
drifting machine load does not favour one side. Per-round wall times come from each run's ``timings.jsonl``
(``round_time``: local training, aggregation, share phase, evaluation, checkpoint); medians skip round 1 (Ray
actor start and data loading on the Flower side, allocator warm-up on both) when there are at least 3
rounds. Process CPU time per run is recorded too (engine; Flower with ``--runtime loopback``, where all work
happens in this process): on a shared machine it is the steadier measure of cost. Also checks that both
engines logged identical metrics. Writes JSON.

``--runtime loopback`` replaces Flower's simulation runtime by :class:`fedaug.flower.loopback.LoopbackGrid`
(same ServerApp and ClientApp code, messages through Flower's protobuf serialisation, no Ray): the cost of
the adapter itself, separated from the cost of Flower's runtime.

``--device`` (default ``auto``) is both sides' ``engine.device``; with Ray, ``--gpus-per-client`` is each
ClientApp's GPU share (``fedaug flower simulate --gpus-per-client``).

Usage::

    python benchmarks/flower_vs_engine.py                              # default preset, 3 rounds
    python benchmarks/flower_vs_engine.py --rounds 4 --repeats 2 --out studies/flower/timing.json
    python benchmarks/flower_vs_engine.py --runtime loopback
    python benchmarks/flower_vs_engine.py --device cuda --gpus-per-client 0.25 --num-cpus 4
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from fedaug.config.identity import run_dir_for
from fedaug.config.load import load_config
from fedaug.engine.checkpoint import read_jsonl
from fedaug.flower import client_app
from fedaug.flower.loopback import LoopbackGrid, task_identity
from fedaug.flower.server_app import serve
from fedaug.flower.simulation import simulate
from fedaug.runs.resolve import load_data_and_partition
from fedaug.runs.runner import comparison_configs, run_experiment
from machine import (  # benchmarks/ is the script's directory
    add_device_argument,
    benchmark_device,
    device_facts,
    write_report,
)

REPO = Path(__file__).resolve().parents[1]


def _round_times(config: Any) -> list[float]:
    return [r["round_time"] for r in read_jsonl(run_dir_for(config) / "timings.jsonl")]


def _median(times: list[float]) -> float:
    return statistics.median(times[1:] if len(times) >= 3 else times)


def _run_engine(configs: list[Any]) -> dict[str, Any]:
    """Runs each config in-process; wall time of all, process CPU time of each (one thread)."""
    cpu, start = {}, time.perf_counter()
    for config in configs:
        tick = time.process_time()
        run_experiment(config)
        cpu[config.method.name] = time.process_time() - tick
    return {"wall": time.perf_counter() - start, "cpu": cpu}


def _run_flower(configs: list[Any], args: argparse.Namespace) -> dict[str, Any]:
    """Runs the configs on Flower; CPU time per config only for the loopback (Ray's work is elsewhere)."""
    cpu, start = {}, time.perf_counter()
    if args.runtime == "ray":
        simulate(configs, num_cpus=args.num_cpus, gpus_per_client=args.gpus_per_client)
    else:
        num_clients = len(load_data_and_partition(configs[0])[1].train_indices)
        with task_identity():
            for config in configs:
                tick = time.process_time()
                serve(LoopbackGrid(client_app.app, num_clients), [config], fresh=False, node_timeout=10)
                cpu[config.method.name] = time.process_time() - tick
    return {"wall": time.perf_counter() - start, "cpu": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="*", default=[str(REPO / "configs" / "default.yaml")])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--num-cpus", type=int, default=1, help="Ray CPUs (= concurrent clients)")
    parser.add_argument("--runtime", choices=("ray", "loopback"), default="ray")
    parser.add_argument(
        "--gpus-per-client", type=float, default=0.0, help="GPU share per ClientApp (Ray; default 0)"
    )
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--out", type=Path)
    add_device_argument(parser)
    args = parser.parse_args()
    device = benchmark_device(args.device)
    torch.set_num_threads(1)
    results: dict[str, Any] = {
        "runtime": args.runtime,
        "rounds": args.rounds,
        "num_cpus": args.num_cpus,
        "gpus_per_client": args.gpus_per_client,
        **device_facts(device),
        "runs": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            overrides = [
                f"train.rounds={args.rounds}",
                "engine.num_threads=1",
                "engine.progress=false",
                f"out_dir={tmp}/{repeat}",
                *args.overrides,
                f"engine.device={device}",
            ]
            configs = comparison_configs(load_config(args.configs, overrides))
            flower = [dataclasses.replace(c, name=c.name + "-flower") for c in configs]
            order = ("engine", "flower") if repeat % 2 == 0 else ("flower", "engine")  # ABBA: cancels drift
            cost: dict[str, dict[str, Any]] = {}
            for side in order:
                cost[side] = _run_engine(configs) if side == "engine" else _run_flower(flower, args)
            for config, on_flower in zip(configs, flower, strict=True):
                engine_times, flower_times = _round_times(config), _round_times(on_flower)
                same = read_jsonl(run_dir_for(config) / "metrics.jsonl") == read_jsonl(
                    run_dir_for(on_flower) / "metrics.jsonl"
                )
                name = config.method.name
                results["runs"].append(
                    {
                        "repeat": repeat,
                        "order": list(order),
                        "method": name,
                        "engine_round_s": engine_times,
                        "flower_round_s": flower_times,
                        "engine_median_s": _median(engine_times),
                        "flower_median_s": _median(flower_times),
                        "ratio": _median(flower_times) / _median(engine_times),
                        "engine_cpu_s": cost["engine"]["cpu"].get(name),
                        "flower_cpu_s": cost["flower"]["cpu"].get(name),
                        "engine_wall_s": cost["engine"]["wall"],
                        "flower_wall_s": cost["flower"]["wall"],
                        "identical_metrics": same,
                        "test_acc": [
                            r["test/acc"] for r in read_jsonl(run_dir_for(on_flower) / "metrics.jsonl")
                        ],
                    }
                )
    if args.out:
        write_report(args.out, results, echo=True)
    else:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
