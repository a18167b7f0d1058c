"""Engine time per round versus the compute floor (the same local steps in a bare loop).

Runs a preset for a few rounds with the real engine and, right after each round (outside its timed span),
replays exactly the same mini-batch sizes (same clients, epochs and batch splits) in a bare
``forward -> CE -> backward -> Adam`` loop on one model and times a bare evaluation of the test set. Engine
and floor alternate round by round in one process, so their ratio is meaningful on a shared, noisy machine.
The bare loop runs in the run's ``engine.precision`` and memory format per phase (``engine.channels_last``);
it is always the sequential loop, also when the engine batches clients (``engine.batched_clients``), so a
ratio below 1 there is a gain over the sequential floor.

The round is split into the engine's phases (``timings.jsonl``: local training, aggregation, share phase,
evaluation, checkpoint) and into the overhead over the floor: ``train - floor_train`` is the engine plus the
method's extra work inside local training (FLea's mixed loss and buffer), ``eval - floor_eval`` the
evaluation overhead, and aggregation + share + checkpoint the rest. Runs per hour are
``3600 / (round_time * the preset's rounds)``. Peak memory is the process's maximum resident set size
(``resource.getrusage``; tracemalloc does not see torch's tensor memory). Medians skip round 1 (allocator
and oneDNN warm-up) when there are at least 3 rounds. ``--device`` (default ``auto``) runs engine and floor on
that device (``engine.device``); on a GPU the floor's clock waits for the GPU, and the JSON adds the GPU's
peak allocated memory. Writes JSON.

Usage::

    python benchmarks/engine_vs_floor.py                       # default preset, 5 rounds
    python benchmarks/engine_vs_floor.py --rounds 3 --set method.name=flea --out benchmarks/results/x.json
    python benchmarks/engine_vs_floor.py --device cuda --out /tmp/engine_vs_floor_cuda.json
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from fedaug.config.identity import run_dir_for
from fedaug.config.load import load_config
from fedaug.config.schema import ExperimentConfig
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.evaluation import evaluate
from fedaug.engine.simulation import Simulation, SimulationSpec
from fedaug.runs.runner import prepare
from fedaug.runtime.memory_format import apply_channels_last
from fedaug.training.loop import batch_indices
from machine import (  # benchmarks/ is the script's directory
    add_device_argument,
    benchmark_device,
    clock,
    device_facts,
    write_report,
)

REPO = Path(__file__).resolve().parents[1]
PHASES = ("train", "aggregate", "share", "eval", "checkpoint", "round_time")


def replay_batch_sizes(
    records: list[dict[str, Any]], client_sizes: tuple[int, ...], epochs: int, batch: int
) -> list[list[int]]:
    """Per round, the sizes of every local mini-batch the engine ran (in order)."""
    rounds = []
    for record in records:
        sizes = []
        for client in record["clients"]:
            order = torch.arange(client_sizes[client])
            sizes += [len(b) for b in batch_indices(order, batch)] * epochs
        rounds.append(sizes)
    return rounds


def bare_train(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    sizes: list[int],
    lr: float,
    precision: str = "float32",
) -> float:
    """Seconds for the given mini-batches in the barest loop (one Adam for the whole round), on ``x``'s
    device (the batches drawn on the CPU, as the engine's)."""
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(0)
    bf16 = precision == "bf16"
    start = clock(x.device)
    for size in sizes:
        idx = torch.randint(0, x.shape[0], (size,), generator=gen).to(x.device)
        with torch.autocast(x.device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            logits = model(x[idx])
        loss = F.cross_entropy(logits.float(), y[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    return clock(x.device) - start


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _median(values: list[float]) -> float:
    return statistics.median(values[1:] if len(values) >= 3 else values)


class _FloorAfterEachRound(Simulation):
    """The engine, with each round's floor run right after that round, outside the round's timed span.

    Interleaving engine and floor round by round lets slow drifts of the machine's load hit both alike.
    """

    def __init__(self, spec: SimulationSpec, config: ExperimentConfig) -> None:
        super().__init__(spec)
        self.config = config
        # the floor computes what the engine computes: the same device, and the same memory format per phase
        # (engine.channels_last)
        device = self.spec.run.device
        self.model = apply_channels_last(spec.model_fn().to(device), spec.channels_last, "client")
        self.eval_model = apply_channels_last(spec.model_fn().to(device), spec.channels_last, "eval")
        self.sizes: list[list[int]] = []
        self.floor_train: list[float] = []
        self.floor_eval: list[float] = []

    def _report(self, bar: Any, record: dict[str, Any], timing: Any, records: list[dict[str, Any]]) -> None:
        super()._report(bar, record, timing, records)
        spec, train = self.spec, self.config.train
        precision = self.config.engine.precision
        sizes = replay_batch_sizes([record], spec.run.client_sizes, train.local_epochs, train.batch_size)[0]
        if not self.sizes:  # warm-up
            bare_train(self.model, spec.train_x, spec.train_y, sizes[:5], train.lr, precision)
        self.sizes.append(sizes)
        self.floor_train.append(
            bare_train(self.model, spec.train_x, spec.train_y, sizes, train.lr, precision)
        )
        tick = clock(spec.run.device)
        evaluate(
            self.eval_model,
            spec.test_x,
            spec.test_y,
            num_classes=spec.run.num_classes,
            batch_size=spec.eval_batch_size,
            precision=precision,
        )
        self.floor_eval.append(clock(spec.run.device) - tick)


def measure(configs: list[str], overrides: list[str], rounds: int, device: torch.device) -> dict[str, Any]:
    """Runs ``configs`` + ``overrides`` for ``rounds`` rounds on ``device`` and its bare floor; returns the
    result dict."""
    full_rounds = load_config(configs, overrides).train.rounds
    on = f"engine.device={device}"
    with tempfile.TemporaryDirectory() as tmp:
        fixed = [on, f"train.rounds={rounds}", f"out_dir={tmp}", "engine.progress=false"]
        # the floor is an eager loop: the engine's steps are eager too unless --set turns graphs on
        config = load_config(configs, ["engine.cuda_graphs=false", *overrides, *fixed])
        if config.engine.num_threads is not None:
            torch.set_num_threads(config.engine.num_threads)
        run_dir = run_dir_for(config)
        run_dir.mkdir(parents=True)
        prepared = prepare(config, run_dir)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        sim = _FloorAfterEachRound(prepared.spec, config)
        sim.run()
        peak_engine = peak_rss_mib()
        records = read_jsonl(run_dir / "metrics.jsonl")
        timings = read_jsonl(run_dir / "timings.jsonl")
    spec, precision = prepared.spec, config.engine.precision
    tensors = (spec.train_x, spec.train_y, spec.test_x, spec.test_y)
    data_mib = sum(t.numel() * t.element_size() for t in tensors) / 2**20
    sizes = sim.sizes
    engine = {phase: _median([t[phase] for t in timings]) for phase in PHASES}
    floor_train, floor_eval = _median(sim.floor_train), _median(sim.floor_eval)
    floor = floor_train + floor_eval
    phases = ("train", "aggregate", "share", "eval", "checkpoint")
    overhead = {
        "local_training": engine["train"] - floor_train,
        "evaluation": engine["eval"] - floor_eval,
        "aggregation": engine["aggregate"],
        "share": engine["share"],
        "checkpoint": engine["checkpoint"],
        "other": engine["round_time"] - sum(engine[p] for p in phases),
    }
    return {
        "preset": [str(c) for c in configs],
        "overrides": overrides,
        "method": config.method.name,
        "model": config.model.name,
        "dataset": config.data.name,
        "dataset_source": prepared.dataset.source,
        "num_clients": spec.run.num_clients,
        "clients_per_round": spec.clients_per_round,
        "precision": precision,
        "channels_last": spec.channels_last,
        "batched_clients": spec.batched_clients,
        "rounds": len(records),
        "threads": torch.get_num_threads(),
        "steps_per_round": statistics.median(len(s) for s in sizes),
        "engine": engine,
        "floor": {"train": floor_train, "eval": floor_eval, "train_plus_eval": floor},
        "overhead": overhead,
        "overhead_fraction_of_floor": (engine["round_time"] - floor) / floor,
        "ratio_train": engine["train"] / floor_train,
        "ratio_round": engine["round_time"] / floor,
        "memory_mib": {"peak_rss": peak_engine, "dataset_tensors": data_mib, **gpu_memory_mib(device)},
        "engine_wall_s": sum(t["round_time"] for t in timings),
        "preset_rounds": full_rounds,
        "runs_per_hour": 3600 / (engine["round_time"] * full_rounds),
        **device_facts(device),
    }


def gpu_memory_mib(device: torch.device) -> dict[str, float]:
    """The GPU's peak allocated memory since the run started (``{}`` on the CPU)."""
    if device.type != "cuda":
        return {}
    return {"peak_gpu_allocated": torch.cuda.max_memory_allocated(device) / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="*", default=[str(REPO / "configs" / "default.yaml")])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "engine_vs_floor.json"))
    add_device_argument(parser)
    args = parser.parse_args()
    result = measure(args.configs, args.overrides, args.rounds, benchmark_device(args.device))
    write_report(args.out, result, echo=True)


if __name__ == "__main__":
    main()
