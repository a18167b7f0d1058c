"""Engine time per round versus the compute floor (the same local steps in a bare loop).

Runs a preset for a few rounds with the real engine, then replays exactly the same mini-batch sizes
(same clients, epochs and batch splits) in a bare ``forward -> CE -> backward -> Adam`` loop on one model, and
times a bare evaluation of the test set. Both are measured in the same process, one after the other, so
their ratio is meaningful on a shared, noisy machine. Writes JSON.

Usage::

    python benchmarks/engine_vs_floor.py                       # default preset, 5 rounds
    python benchmarks/engine_vs_floor.py --rounds 3 --set model.name=harnet --out benchmarks/results/x.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.evaluation import evaluate
from fedaug.experiments.load import load_config
from fedaug.experiments.runner import prepare, run_experiment
from fedaug.local_training import batch_indices

REPO = Path(__file__).resolve().parents[1]


def replay_batch_sizes(
    records: list[dict], client_sizes: tuple[int, ...], epochs: int, batch: int
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
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, sizes: list[int], lr: float
) -> float:
    """Seconds for the given mini-batches in the barest loop (one Adam for the whole round)."""
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    for size in sizes:
        idx = torch.randint(0, x.shape[0], (size,), generator=gen)
        loss = F.cross_entropy(model(x[idx]), y[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="*", default=[str(REPO / "configs" / "default.yaml")])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "engine_vs_floor.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(
            args.configs,
            [*args.overrides, f"train.rounds={args.rounds}", f"out_dir={tmp}", "engine.progress=false"],
        )
        run_experiment(config)
        run_dir = next(Path(tmp).rglob("metrics.jsonl")).parent
        records = read_jsonl(run_dir / "metrics.jsonl")
        timings = read_jsonl(run_dir / "timings.jsonl")
        prepared = prepare(config, run_dir)
    spec = prepared.spec
    sizes = replay_batch_sizes(
        records, spec.run.client_sizes, config.train.local_epochs, config.train.batch_size
    )
    model = spec.model_fn()
    bare = [bare_train(model, spec.train_x, spec.train_y, s, config.train.lr) for s in sizes]
    eval_times = []
    for _ in range(len(records)):
        start = time.perf_counter()
        evaluate(
            model,
            spec.test_x,
            spec.test_y,
            num_classes=spec.run.num_classes,
            batch_size=config.engine.eval_batch_size,
        )
        eval_times.append(time.perf_counter() - start)
    # Round 1 warms up allocators and oneDNN kernels in both loops: report medians over the rounds.
    engine_train = statistics.median(t["train"] for t in timings)
    engine_round = statistics.median(t["round_time"] for t in timings)
    floor_train = statistics.median(bare)
    floor_eval = statistics.median(eval_times)
    result = {
        "preset": [str(c) for c in args.configs],
        "overrides": args.overrides,
        "rounds": len(records),
        "threads": torch.get_num_threads(),
        "steps_per_round": statistics.median(len(s) for s in sizes),
        "engine": {
            phase: statistics.median(t[phase] for t in timings)
            for phase in ("train", "aggregate", "share", "eval", "checkpoint", "round_time")
        },
        "floor": {"train": floor_train, "eval": floor_eval, "train_plus_eval": floor_train + floor_eval},
        "ratio_train": engine_train / floor_train,
        "ratio_round": engine_round / (floor_train + floor_eval),
        "runs_per_hour_100_rounds": 3600 / (engine_round * 100),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
