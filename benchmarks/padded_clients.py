"""Sequential vs vmap-batched vs padded-batched clients (``engine.batched_clients`` false / true / padded):
seconds per round of whole runs of a preset, side by side in one process.

For each method, runs the preset for ``--rounds`` rounds once per mode, the modes one after the other, and
reports the median round time and local-training time per round over rounds 2.. (round 1 warms up the
allocator, oneDNN and, on a GPU, records the graphs), the wall time of the run, the final test accuracy and
the largest absolute difference of the final global state (weights and BatchNorm buffers, running
variances included) from the first mode's. ``--device cuda`` runs it on a GPU (there ``engine.cuda_graphs``
keeps its default: on for sequential and padded, off for vmap). Writes JSON.

Usage::

    python benchmarks/padded_clients.py --rounds 4 --out benchmarks/results/padded_clients_cpu.json
    python benchmarks/padded_clients.py --methods fedavg --modes false padded --device cuda --out /tmp/p.json
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch

from fedaug.config.load import load_config
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.simulation import Simulation
from fedaug.runs.runner import prepare
from machine import add_device_argument, benchmark_device, clock, machine_facts, write_report

REPO = Path(__file__).resolve().parents[1]


def run_mode(configs: list[str], overrides: list[str], mode: str) -> dict[str, Any]:
    """One run of the preset with ``engine.batched_clients=mode``: its timings and final global weights."""
    config = load_config(configs, [*overrides, f"engine.batched_clients={mode}", "engine.progress=false"])
    with tempfile.TemporaryDirectory() as tmp:
        resolved = prepare(config, Path(tmp) / "run")
        device = resolved.spec.run.device
        start = clock(device)
        summary = Simulation(resolved.spec).run()
        wall = clock(device) - start
        timings = read_jsonl(Path(tmp) / "run" / "timings.jsonl")
        final = torch.load(Path(tmp) / "run" / "ckpt" / "latest.pt", weights_only=False)["state"]
    later = timings[1:] if len(timings) > 1 else timings
    return {
        "s_per_round": statistics.median(t["round_time"] for t in later),
        "train_s_per_round": statistics.median(t["train"] for t in later),
        "wall_s": wall,
        "final_test_acc": summary.get("final/test_acc", summary.get("final_acc")),
        "cuda_graphs": resolved.spec.cuda_graphs,
        "weights": {k: v.detach().double().cpu() for k, v in final["model_state"].items()},
    }


def bench(configs: list[str], overrides: list[str], modes: list[str]) -> dict[str, Any]:
    results = {mode: run_mode(configs, overrides, mode) for mode in modes}
    reference = results[modes[0]].pop("weights")
    for mode in modes[1:]:
        weights = results[mode].pop("weights")
        results[mode]["max_abs_weight_diff_vs_" + modes[0]] = max(
            float((weights[k] - v).abs().max()) for k, v in reference.items()
        )
        results[mode]["largest_diffs_vs_" + modes[0]] = largest_diffs(reference, weights)
        results[mode]["s_per_round_ratio_vs_" + modes[0]] = (
            results[mode]["s_per_round"] / results[modes[0]]["s_per_round"]
        )
    return results


def largest_diffs(
    reference: dict[str, torch.Tensor], other: dict[str, torch.Tensor], top: int = 5
) -> list[Any]:
    """The ``top`` state entries (weights and buffers) farthest from ``reference``: name, largest absolute
    difference, and that relative to the entry's largest magnitude in ``reference``."""
    rows = []
    for k, v in reference.items():
        diff = float((other[k] - v).abs().max())
        rows.append({"name": k, "max_abs": diff, "relative": diff / max(float(v.abs().max()), 1e-30)})
    return sorted(rows, key=lambda r: -r["max_abs"])[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="*", default=["default"])
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--methods", nargs="+", default=["fedavg", "flea"])
    parser.add_argument("--modes", nargs="+", default=["false", "true", "padded"])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "padded_clients.json"))
    add_device_argument(parser)
    args = parser.parse_args()
    device = benchmark_device(args.device)
    torch.set_num_threads(args.threads)
    common = [
        *args.overrides,
        f"train.rounds={args.rounds}",
        "compare=[]",
        f"engine.device={device}",
        f"engine.num_threads={args.threads}",
    ]
    result = {
        "threads": torch.get_num_threads(),
        "rounds": args.rounds,
        "note": (
            "medians over rounds 2.. of one run per mode, modes run one after the other in one process; "
            "the machine may be shared (see loadavg)"
        ),
        **machine_facts(device),
        "methods": {m: bench(args.configs, [*common, f"method={m}"], args.modes) for m in args.methods},
    }
    write_report(args.out, result, echo=True)


if __name__ == "__main__":
    main()
