"""Whole-run speed on one device: sequential clients vs batched clients vs packed runs -> JSON.

For FedAvg and FLea on the default preset (UCI-HAR, HARNet, Qua(2), K = 75, seed 0), on ``--device``:

* ``default``: one run with the engine's defaults on the device (what ``fedaug run`` does: graphs on a GPU);
* ``sequential``: one run, clients one after the other (``engine.batched_clients: false``);
* ``batched``: one run, a round's clients stacked into one vmapped step (``engine.batched_clients: true``);
* ``graphs``: one run, clients one after the other, each local step replayed as a CUDA graph
  (``engine.cuda_graphs: true``; :mod:`fedaug.training.step_graphs`);
* ``graphs_unreleased``: the same without returning dropped recordings' memory to the device
  (``fedaug.training.step_graphs.release_memory`` made a no-op: what the engine did before), to compare the
  memory the
  process reserves (``peak_gpu_reserved_mib``) and the time emptying the cache costs;
* ``packed``: ``--workers`` runs of seeds 0..W-1 at once, one worker process each, sharing the device
  (``fedaug sweep --workers W``), measured as wall time for all of them;
* ``packed_graphs``: the same with ``engine.cuda_graphs: true``.

A run alone (not packed) also reports what ``benchmarks/device_runs.py`` reported before it was folded in
here: its first round, its time outside the rounds (``outside_rounds_s``: start-up, summary, exit) and, for
the process's first run, its cold start phase by phase (``startup``, from its first ``timings.jsonl``
record: :mod:`fedaug.runtime.startup`; its ``benchmark`` phase is this script's FLOP count); its best,
last-10 and
final accuracy; the report quotes what the same seed gave on our CPU (``cpu_reference``).
``--modes default`` (the engine's defaults on the device, as ``fedaug run``) is the old ``device_runs.py``.

A ``graphs`` run also reports ``step_graphs``: the shapes recorded, the steps replayed, those run eagerly (a
hook whose capture failed) and ``record_s``, the host seconds spent recording (warm-ups included), which says
how much of the run re-recording per round costs.

Each mode runs ``--rounds`` rounds (default 100; fewer are scaled to 100 in ``run_s_100``). Reported per mode:
time per round (median), time per run, runs per hour, peak GPU memory of the process, allocated and reserved
(the caching allocator's; not for packed workers, which are other processes), and the achieved model
arithmetic in TFLOP/s against the device's dense peak: HARNet forward + backward FLOPs per training sample
(:func:`fedaug.models.flops.count_flops`, from the layers' shapes) times the training samples processed, plus
the test forward passes, divided by the run's wall time. FLea's extra work (dCor, teacher, buffer) is not
counted, so its TFLOP/s is a lower bound. The FLea authors' code on an H200 is quoted for comparison (1.3 s
and 8 s per round), not measured here.

Usage::

    python benchmarks/gpu.py --device cuda --out benchmarks/results/gpu_h200.json
    python benchmarks/gpu.py --device cpu --rounds 2 --workers 2 --out /tmp/gpu.json     # a quick check
    python benchmarks/gpu.py --device cuda --modes sequential,graphs,packed,packed_graphs --out gpu.json
    python benchmarks/gpu.py --device cuda --modes graphs --methods fedavg --out cold.json   # one run, cold
    python benchmarks/gpu.py --device cuda --preset cifar10_mobilenet,cifar10_resnet18,cifar10_resnet50 \
        --out benchmarks/results/gpu_h100_conv_presets.json

``--preset`` with a CIFAR-10 conv-net preset (:data:`gpu_steps.PRESETS`) times client steps per mode
(eager, channels-last, bf16, CUDA graphs, batched clients, batched clients in one graph, ``--packed``
processes at once) against the same model's large-batch floor (batch 1024, bf16, channels-last) in the same
command: :mod:`gpu_steps`.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from machine import (  # benchmarks/ is on sys.path
    add_device_argument,
    benchmark_device,
    machine_facts,
    write_report,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import fedaug.training.loop as local_training  # noqa: E402
import fedaug.training.step_graphs as step_graphs  # noqa: E402
from fedaug.config.identity import run_dir_for  # noqa: E402
from fedaug.config.load import load_config  # noqa: E402
from fedaug.engine.checkpoint import read_jsonl  # noqa: E402
from fedaug.models.flops import count_flops  # noqa: E402
from fedaug.runs.runner import prepare, run_experiment  # noqa: E402
from fedaug.runtime import startup  # noqa: E402
from fedaug.sweeps.sweep import expand_sweep, run_sweep  # noqa: E402
from fedaug.training.step_graphs import StepGraphs  # noqa: E402
from gpu_steps import FLOOR_BATCH, PRESETS, measure  # noqa: E402
from gpu_steps import MODES as STEP_MODES  # noqa: E402

DEFAULT = REPO / "configs" / "default.yaml"
MODES_DEFAULT = (
    "sequential,batched,packed"  # the default preset's; a conv-net preset's default: all its modes
)
OFFICIAL_ROUND_S_H200 = {"fedavg": 1.3, "flea": 8.0}  # the FLea authors' code, one process (issue #32)
CPU_REFERENCE = {  # what seed 0 gave on our CPU, quoted (not measured here)
    "source": "studies/uci_har_qua2_k75/README.md (2 shared CPU cores, 1 thread, seed 0, 100 rounds)",
    "fedavg": {"best_acc": 0.7486, "last10_acc": 0.6069, "wall_s": 64.4 * 60, "median_round_s": 32.5},
    "flea": {"best_acc": 0.5562, "last10_acc": 0.5036, "wall_s": 81.1 * 60, "median_round_s": 42.2},
}
# Vendor dense peaks, TFLOP/s (SXM parts): FP32 on CUDA cores, TF32 and BF16 on tensor cores.
PEAK_TFLOPS = {
    "H100": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4},
    "H200": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4},
}


def model_flops(batch: int = 32) -> tuple[float, float, int, list[int]]:
    """FLOPs per training sample (forward + backward) and per test sample (forward) of the preset's model,
    the test set size, and the clients' local sizes (seed 0's partition, the one ``one_run`` trains)."""
    config = load_config([DEFAULT], ["engine.device=cpu"])
    spec = prepare(config, Path(tempfile.mkdtemp())).spec
    flops = count_flops(spec.model_fn(), tuple(spec.train_x.shape[1:]), batch=batch)
    sizes = [int(i.numel()) for i in spec.client_indices]
    return flops.train, flops.forward, int(spec.test_y.shape[0]), sizes


MODES = {  # engine overrides of each mode
    "default": [],  # the engine's defaults on the device, as `fedaug run`: the old device_runs.py
    "sequential": ["engine.cuda_graphs=false"],  # eager steps: graphs are on by default on a GPU
    "batched": ["engine.batched_clients=true"],
    "graphs": ["engine.cuda_graphs=true"],
    "graphs_unreleased": ["engine.cuda_graphs=true"],
    "packed": ["engine.cuda_graphs=false"],
    "packed_graphs": ["engine.cuda_graphs=true"],
}


def one_run(
    method: str, mode: str, args: argparse.Namespace, out_dir: Path, sizes: list[int]
) -> dict[str, Any]:
    """One run of ``method`` (``mode``: sequential, batched or graphs); its times, accuracy and sample
    passes."""
    overrides = [
        f"method={method}",
        "compare=[]",
        f"engine.device={args.device}",
        *MODES[mode],
        f"out_dir={out_dir / mode}",
        f"train.rounds={args.rounds}",
        "engine.progress=false",
        *args.overrides,
    ]
    config = load_config([DEFAULT], overrides)
    device = benchmark_device(args.device)
    if device.type == "cuda":  # the last mode's models are gone: its cached memory is not counted here
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    graphs: list[StepGraphs] = []
    start = time.perf_counter()
    with recorded_into(graphs), unreleased(mode == "graphs_unreleased"):
        summary = run_experiment(config, fresh=True)
    wall = time.perf_counter() - start
    run_dir = run_dir_for(config)
    timings = read_jsonl(run_dir / "timings.jsonl")
    rounds = [r["round_time"] for r in timings]
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    epochs = config.train.local_epochs
    sample_passes = sum(epochs * sum(sizes[c] for c in r["clients"]) for r in metrics)
    result: dict[str, Any] = {
        "mode": mode,
        "rounds": len(rounds),
        "wall_s": round(wall, 3),
        "first_round_s": round(rounds[0], 4),
        "median_round_s": round(statistics.median(rounds), 4),
        "run_s_100": round(statistics.fmean(rounds) * 100, 2),
        "outside_rounds_s": round(wall - sum(rounds), 3),
        "train_sample_passes": sample_passes,
        **{k: summary.get(k) for k in ("best_acc", "last10_acc", "final_acc")},
    }
    if "startup" in timings[0]:  # the process's first run: its cold start, phase by phase
        result["startup"] = timings[0]["startup"]
    if graphs:  # recorded shapes, replayed and eager steps (eager: a hook whose capture failed)
        result["step_graphs"] = {
            **sum((Counter(g.counts) for g in graphs), Counter()),
            "record_s": round(sum(g.record_seconds for g in graphs), 3),  # host time, warm-ups included
        }
    if device.type == "cuda":
        result["peak_gpu_memory_mib"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
        result["peak_gpu_reserved_mib"] = round(torch.cuda.max_memory_reserved(device) / 2**20, 1)
    return result


@contextmanager
def unreleased(active: bool) -> Iterator[None]:
    """Inside the block (when ``active``), dropped recordings' memory stays reserved by the process."""
    original = step_graphs.release_memory
    if active:
        step_graphs.release_memory = lambda: None
    try:
        yield
    finally:
        step_graphs.release_memory = original


@contextmanager
def recorded_into(found: list[StepGraphs]) -> Iterator[None]:
    """Collects the :class:`StepGraphs` local training makes inside the block (to report their counts)."""
    original = local_training.graphs_for

    def graphs_for(*args: Any, **kwargs: Any) -> StepGraphs:
        graphs = original(*args, **kwargs)
        if not any(g is graphs for g in found):
            found.append(graphs)
        return graphs

    local_training.graphs_for = graphs_for
    try:
        yield
    finally:
        local_training.graphs_for = original


def packed(method: str, mode: str, args: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    """``args.workers`` runs (seeds 0..W-1) at once in worker processes sharing the device."""
    sweep = out_dir / f"packed_{method}.yaml"
    seeds = ", ".join(str(s) for s in range(args.workers))
    sweep.write_text(
        f"extends: {DEFAULT}\nname: packed\ncompare: []\nmethod:\n  name: {method}\n"
        f"grid:\n  seed: [{seeds}]\n"
    )
    points = expand_sweep(
        sweep,
        [
            f"out_dir={out_dir / mode}",
            f"engine.device={args.device}",
            f"train.rounds={args.rounds}",
            *MODES[mode],
            *args.overrides,
        ],
    )
    start = time.perf_counter()
    result = run_sweep(points, workers=args.workers, heartbeat=0)
    wall = time.perf_counter() - start
    if result.failures:
        raise RuntimeError(f"packed runs failed: {result.failures}")
    per_run = wall / len(points) * (100 / args.rounds)
    return {
        "mode": mode,
        "workers": args.workers,
        "runs": len(points),
        "wall_s": round(wall, 3),
        "run_s_100": round(per_run, 2),
        "runs_per_hour": round(3600 / per_run, 1),
        **packed_phases([p.run_dir for p in points]),
    }


PHASES = ("train", "aggregate", "share", "eval", "checkpoint", "round_time")


def packed_phases(run_dirs: list[Path]) -> dict[str, Any]:
    """Median seconds per round of each phase over the packed runs' rounds after the first (which includes
    start-up): how much slower a round gets when runs share the device, and in which phase."""
    rows = [t for d in run_dirs for t in read_jsonl(d / "timings.jsonl") if t["round"] > 1]
    if not rows:
        return {}
    medians = {p: round(statistics.median(r[p] for r in rows if p in r), 4) for p in PHASES}
    return {"median_round_s": medians.pop("round_time"), "median_phase_s": medians}


def conv_presets(parser: argparse.ArgumentParser, args: argparse.Namespace, device: torch.device) -> int:
    """``--preset``: the conv-net presets' client steps per mode and their floor (:mod:`gpu_steps`)."""
    names = [p.strip() for p in args.preset.split(",") if p.strip()]
    if bad := [p for p in names if p not in PRESETS]:
        parser.error(f"unknown --preset {', '.join(bad)}; valid choices: default, {', '.join(PRESETS)}")
    modes = list(STEP_MODES) if args.modes == MODES_DEFAULT else [m.strip() for m in args.modes.split(",")]
    if bad := [m for m in modes if m not in STEP_MODES]:
        parser.error(f"unknown --modes {', '.join(bad)} for --preset; valid choices: {', '.join(STEP_MODES)}")
    if args.packed < 1:
        parser.error(f"--packed must be at least 1, got {args.packed}")
    facts = machine_facts(device)
    peak = next((v for k, v in PEAK_TFLOPS.items() if k in str(facts.get("gpu_name", ""))), None)
    report: dict[str, Any] = {
        "benchmark": "gpu --preset",
        "command": " ".join(["python", *sys.argv]),
        **facts,
        "torch": torch.__version__,
        "device_peak_tflops": peak,
        "presets": [],
    }
    for name in names:
        result = measure(
            name,
            modes,
            device,
            batch=args.batch,
            steps=args.steps,
            clients=args.clients,
            floor_batch=args.floor_batch,
            peak=peak,
            packed=args.packed,
        )
        report["presets"].append(result)
        print(json.dumps({"preset": name, "floor": result["floor"], "modes": result["modes"]}), flush=True)
        write_report(args.out, report)  # after each preset: partial results
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_device_argument(parser)
    parser.add_argument("--methods", default="fedavg,flea")
    parser.add_argument("--modes", default=MODES_DEFAULT)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--workers", type=int, default=4, help="packed runs at once (default 4)")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="a config override"
    )
    parser.add_argument(
        "--preset",
        default="default",
        help=f"default (whole runs, above) or a conv-net preset timed by client steps: {', '.join(PRESETS)}",
    )
    parser.add_argument("--steps", type=int, default=20, help="timed steps per conv-net mode (default 20)")
    parser.add_argument("--batch", type=int, default=None, help="conv-net local batch (default: the paper's)")
    parser.add_argument(
        "--clients", type=int, default=8, help="clients of a batched conv-net step (default 8)"
    )
    parser.add_argument("--floor-batch", type=int, default=FLOOR_BATCH, help="batch of the conv-net floor")
    parser.add_argument(
        "--packed", type=int, default=4, help="processes of the packed conv-net mode (default 4)"
    )
    args = parser.parse_args()
    device = benchmark_device(args.device)
    if args.preset != "default":
        return conv_presets(parser, args, device)
    train_flops, test_flops, test_size, sizes = model_flops()
    startup.mark("benchmark")  # the FLOP count: named in the first run's start-up, not charged to its phases
    facts = machine_facts(device)
    peak = next((v for k, v in PEAK_TFLOPS.items() if k in str(facts.get("gpu_name", ""))), None)
    report: dict[str, Any] = {
        "benchmark": "gpu",
        "preset": str(DEFAULT.relative_to(REPO)),
        **facts,
        "torch": torch.__version__,
        "rounds": args.rounds,
        "model_gflop_per_train_sample": round(train_flops / 1e9, 4),
        "model_gflop_per_test_sample": round(test_flops / 1e9, 4),
        "device_peak_tflops": peak,
        "official_code_h200_round_s": OFFICIAL_ROUND_S_H200,
        "overrides": args.overrides,
        "cpu_reference": CPU_REFERENCE,
        "methods": {},
    }
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if bad := [m for m in modes if m not in MODES]:
        parser.error(f"unknown --modes {', '.join(bad)}; valid choices: {', '.join(MODES)}")
    with tempfile.TemporaryDirectory() as tmp:
        for method in [m.strip() for m in args.methods.split(",") if m.strip()]:
            rows = []
            for mode in modes:
                packs = mode.startswith("packed")
                row = (
                    packed(method, mode, args, Path(tmp))
                    if packs
                    else one_run(method, mode, args, Path(tmp), sizes)
                )
                if not packs:
                    flops = row["train_sample_passes"] * train_flops + row["rounds"] * test_size * test_flops
                    row["achieved_tflops"] = round(flops / row["wall_s"] / 1e12, 4)
                    row["runs_per_hour"] = round(3600 / row["run_s_100"], 1)
                    if method in OFFICIAL_ROUND_S_H200:
                        row["speedup_vs_official_h200"] = round(
                            OFFICIAL_ROUND_S_H200[method] * 100 / row["run_s_100"], 2
                        )
                print(json.dumps({"method": method, **row}), flush=True)
                rows.append(row)
            report["methods"][method] = rows
            write_report(args.out, report)  # after each method: partial results
    return 0


if __name__ == "__main__":
    sys.exit(main())
