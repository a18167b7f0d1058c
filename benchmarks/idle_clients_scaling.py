"""Scaling with the number of clients K: time per round and memory for K = 100 vs K = 10,000 (most idle).

Every case trains the same work per round (``train.clients_per_round`` clients of ``mean_local_size``
synthetic samples each, the same test set), so only the number of idle clients differs. The train set is
``K * mean_local_size`` samples, so memory may grow with K by the data (reported as ``dataset_tensors``) and
nothing else. Each case runs in a fresh subprocess; it reports the set-up time (data, partition, model),
the median round time and its phases, and peak RSS (and on a GPU, ``--device cuda``, its peak allocated
memory). Writes JSON.

Usage::

    python benchmarks/idle_clients_scaling.py      # FedAvg and FLea, K = 100 and 10,000, 3 rounds each
    python benchmarks/idle_clients_scaling.py --clients 100 1000 10000 --methods fedavg
    python benchmarks/idle_clients_scaling.py --device cuda --out /tmp/scaling_cuda.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from machine import (  # benchmarks/ is the script's directory
    add_device_argument,
    benchmark_device,
    machine_facts,
    write_report,
)

REPO = Path(__file__).resolve().parents[1]
PHASES = ("train", "aggregate", "share", "eval", "checkpoint", "round_time")


def overrides(num_clients: int, method: str, args: argparse.Namespace) -> list[str]:
    return [
        "data.name=synthetic",
        f"data.shape={args.shape}",
        "data.num_classes=10",
        f"data.num_train={num_clients * args.local_size}",
        "data.num_test=1000",
        "partition.name=iid",
        f"partition.num_clients={num_clients}",
        f"train.clients_per_round={args.per_round}",
        f"train.rounds={args.rounds}",
        "model.name=mlp",
        f"method={method}",
        "compare=[]",
        "engine.num_threads=1",
        "engine.progress=false",
        f"engine.device={args.device}",
    ]


def child(num_clients: int, method: str, args: argparse.Namespace) -> dict[str, Any]:
    """Runs one case in this process and returns its measurements."""
    import torch

    from fedaug.config.load import load_config
    from fedaug.engine.checkpoint import read_jsonl
    from fedaug.runs.runner import prepare, run_experiment
    from fedaug.runtime.device import resolve_device

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config([], [*overrides(num_clients, method, args), f"out_dir={tmp}"])
        start = time.perf_counter()
        prepared = prepare(config, Path(tmp) / "probe")  # set-up alone: data, partition, model
        setup = time.perf_counter() - start
        spec = prepared.spec
        tensors = (spec.train_x, spec.train_y, spec.test_x, spec.test_y)
        data_mib = sum(t.numel() * t.element_size() for t in tensors) / 2**20
        del prepared, spec, tensors
        device = resolve_device(config.engine.device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        run_experiment(config)
        timings = read_jsonl(next(Path(tmp).rglob("timings.jsonl")))
        ckpt = next(Path(tmp).rglob("latest.pt"))
        ckpt_mib = ckpt.stat().st_size / 2**20
    later = timings[1:] if len(timings) >= 3 else timings
    gpu = {"peak_gpu_mib": torch.cuda.max_memory_allocated(device) / 2**20} if device.type == "cuda" else {}
    return {
        "num_clients": num_clients,
        "method": method,
        "setup_s": setup,
        "round": {p: statistics.median(t[p] for t in later) for p in PHASES},
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "dataset_tensors_mib": data_mib,
        "checkpoint_mib": ckpt_mib,
        **gpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 10000])
    parser.add_argument("--methods", nargs="+", default=["fedavg", "flea"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--local-size", type=int, default=20)
    parser.add_argument("--shape", default="[1, 8, 8]")
    parser.add_argument("--child", nargs=2, metavar=("K", "METHOD"), help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "scaling.json"))
    add_device_argument(parser)
    args = parser.parse_args()
    device = benchmark_device(args.device)
    args.device = str(device)  # the children compute where this process resolved
    if args.child:
        print(json.dumps(child(int(args.child[0]), args.child[1], args)))
        return
    cases = []
    for method in args.methods:
        for k in args.clients:
            command = [sys.executable, __file__, "--child", str(k), method, "--rounds", str(args.rounds)]
            command += ["--per-round", str(args.per_round), "--local-size", str(args.local_size)]
            command += ["--shape", args.shape, "--device", args.device]
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            cases.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(cases[-1]), file=sys.stderr)
    result = {
        "setting": f"synthetic {args.shape} data, {args.local_size} samples per client, iid, mlp, "
        f"{args.per_round} clients per round, {args.rounds} rounds, 1 thread",
        "note": "round times are noisy on a shared machine (see loadavg): compare them between K loosely",
        **machine_facts(device),
        "cases": cases,
    }
    write_report(args.out, result, echo=True)


if __name__ == "__main__":
    main()
