"""Time per round: Flower's simulation runtime versus the in-process engine, same config, same machine.

Runs each method of the preset for a few rounds on the engine, then the same configs in Flower's simulation
(Ray, one SuperNode per client, ``--num-cpus`` actors; 1 by default, so clients train one after the other as
in the engine), alternating ``--repeats`` times (engine, Flower, engine, Flower, ...) so both see the same
machine load. Per-round times come from each run's ``timings.jsonl`` (``round_time``: local training,
aggregation, share phase, evaluation, checkpoint); medians skip round 1 (Ray actor start and data loading on
the Flower side, allocator warm-up on both) when there are at least 3 rounds. The Flower simulation's start
(Ray, node discovery) is reported separately as its wall time minus the rounds. Also checks that both
engines logged identical metrics. Writes JSON.

``--runtime loopback`` replaces Flower's simulation runtime by :class:`fedaug.flower.loopback.LoopbackGrid`
(same ServerApp and ClientApp code, messages through Flower's protobuf serialisation, no Ray): the cost of
the adapter itself, separated from the cost of Flower's runtime.

Usage::

    python benchmarks/flower_vs_engine.py                              # default preset, 3 rounds
    python benchmarks/flower_vs_engine.py --rounds 4 --repeats 2 --out docs/results/flower/timing.json
    python benchmarks/flower_vs_engine.py --runtime loopback
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

from fedaug.engine.checkpoint import read_jsonl
from fedaug.experiments.load import load_config
from fedaug.experiments.runner import comparison_configs, load_data_and_partition, run_dir_for, run_experiment
from fedaug.flower import client_app
from fedaug.flower.loopback import LoopbackGrid, task_identity
from fedaug.flower.server_app import serve
from fedaug.flower.simulation import simulate

REPO = Path(__file__).resolve().parents[1]


def _round_times(config: Any) -> list[float]:
    return [r["round_time"] for r in read_jsonl(run_dir_for(config) / "timings.jsonl")]


def _median(times: list[float]) -> float:
    return statistics.median(times[1:] if len(times) >= 3 else times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="*", default=[str(REPO / "configs" / "default.yaml")])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--num-cpus", type=int, default=1, help="Ray CPUs (= concurrent clients)")
    parser.add_argument("--runtime", choices=("ray", "loopback"), default="ray")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[str, Any] = {
        "runtime": args.runtime,
        "rounds": args.rounds,
        "num_cpus": args.num_cpus,
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
            ]
            configs = comparison_configs(load_config(args.configs, overrides))
            flower = [dataclasses.replace(c, name=c.name + "-flower") for c in configs]
            start = time.perf_counter()
            for config in configs:
                run_experiment(config)
            engine_wall = time.perf_counter() - start
            start = time.perf_counter()
            if args.runtime == "ray":
                simulate(flower, num_cpus=args.num_cpus)
            else:
                with task_identity():
                    num_clients = len(load_data_and_partition(configs[0])[1].train_indices)
                    serve(LoopbackGrid(client_app.app, num_clients), flower, fresh=False, node_timeout=10)
            flower_wall = time.perf_counter() - start
            flower_rounds = sum(sum(_round_times(c)) for c in flower)
            for config, on_flower in zip(configs, flower, strict=True):
                engine_times, flower_times = _round_times(config), _round_times(on_flower)
                same = read_jsonl(run_dir_for(config) / "metrics.jsonl") == read_jsonl(
                    run_dir_for(on_flower) / "metrics.jsonl"
                )
                results["runs"].append(
                    {
                        "repeat": repeat,
                        "method": config.method.name,
                        "engine_round_s": engine_times,
                        "flower_round_s": flower_times,
                        "engine_median_s": _median(engine_times),
                        "flower_median_s": _median(flower_times),
                        "ratio": _median(flower_times) / _median(engine_times),
                        "identical_metrics": same,
                        "test_acc": [
                            r["test/acc"] for r in read_jsonl(run_dir_for(on_flower) / "metrics.jsonl")
                        ],
                    }
                )
            results["runs"][-1]["engine_wall_s"] = engine_wall
            results["runs"][-1]["flower_wall_s"] = flower_wall
            results["runs"][-1]["flower_start_s"] = flower_wall - flower_rounds
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
