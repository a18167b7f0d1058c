"""What does a round of the reference runs (``local``, ``centralized``) cost beside FedAvg's on FSDD? -> JSON.

The setting of the campaign's ``fsdd_reference_runs`` grid (``flea_fsdd``: AudioNet on FSDD, Qua(3),
K = 27, 7 clients a round, seed 0, one thread), a few rounds of each of

* ``fedavg``, the denominator;
* ``local (uncached)``: ``local`` with every client's model evaluated every round, as before the per-client
  evaluation cache (:mod:`fedaug.engine.eval_cache`, patched to compute every lookup);
* ``local``: with the cache (only changed models evaluated: the round's 7 participants, and 27 in round 1);
* ``centralized``: the pooled data, FedAvg's step count.

Each variant runs fresh in a temporary out dir, ``--repeats`` times, the order reversed on every other repeat
(so load from others on a shared machine hits all alike). Per variant: the median ``round_time`` and per-phase
time (``timings.jsonl``) over rounds 2.. (round 1 pays the start-up and, for ``local``, 27 first evaluations),
and its ratio to FedAvg's median. It checks that ``local``'s ``metrics.jsonl`` is the same bytes with and
without the cache. For ``centralized`` it also reports the samples per gradient step against FedAvg's: the
pool's batches are full, a client's last one is short, so the same steps carry more samples.

Usage::

    python benchmarks/reference_rounds.py --data-dir ../shared/data --rounds 4 --repeats 2 \\
        --out benchmarks/results/reference_rounds_fsdd_cpu.json
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from fedaug.config.presets import find
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.eval_cache import ClientEvalCache
from fedaug.runs.resolve import load_data_and_partition
from fedaug.runs.runner import run_experiment
from fedaug.sweeps.sweep import expand_sweep
from fedaug.training.loop import steps_per_epoch
from machine import machine_facts, write_report

VARIANTS = ("fedavg", "local (uncached)", "local", "centralized")
GRID = ("seed=[0]", "partition.num_clients=[27]", "partition=[{name: quantity, classes_per_client: 3}]")
PHASES = ("train", "aggregate", "eval", "checkpoint", "round_time")


def preset() -> Path:
    path = find("flea_fsdd")
    assert path is not None, "the flea_fsdd preset is part of fedaug"
    return path


@contextlib.contextmanager
def uncached() -> Iterator[None]:
    """The engine before the cache: every lookup computes (and is counted)."""

    def get(self: ClientEvalCache[Any], client: int, weights: Any, compute: Callable[[], Any]) -> Any:
        self.computed += 1
        return compute()

    with mock.patch.object(ClientEvalCache, "get", get):
        yield


def run_variant(variant: str, rounds: int, data_dir: str, out_dir: Path) -> Path:
    """Runs ``variant`` fresh under ``out_dir``; returns its run dir."""
    method = variant.split()[0]
    overrides = [f"train.rounds={rounds}", f"out_dir={out_dir}", f"data.data_dir={data_dir}"]
    grid = [*GRID, f"method=[{method}]"]
    (point,) = expand_sweep(preset(), overrides, grid)
    with uncached() if "uncached" in variant else contextlib.nullcontext():
        run_experiment(point.config, fresh=True)
    return point.run_dir


def samples_per_step(run_dir: Path, data_dir: str) -> dict[str, float]:
    """Mean samples per gradient step of FedAvg's clients and of the pool, over the run's rounds."""
    (point,) = expand_sweep(preset(), [f"data.data_dir={data_dir}"], [*GRID, "method=[centralized]"])
    _, partition = load_data_and_partition(point.config)
    sizes = [len(idx) for idx in partition.train_indices]
    train = point.config.train
    fedavg_samples = fedavg_steps = pool_samples = 0
    for record in read_jsonl(run_dir / "metrics.jsonl"):
        steps = [train.local_epochs * steps_per_epoch(sizes[c], train.batch_size) for c in record["clients"]]
        fedavg_samples += sum(train.local_epochs * sizes[c] for c in record["clients"])
        fedavg_steps += sum(steps)
        # the pool's epochs are full batches but for each epoch's last one (sum(sizes) samples)
        full, rest = divmod(sum(steps), steps_per_epoch(sum(sizes), train.batch_size))
        last_epoch = min(rest * train.batch_size, sum(sizes))
        pool_samples += full * sum(sizes) + last_epoch
    return {"fedavg": fedavg_samples / fedavg_steps, "centralized": pool_samples / fedavg_steps}


def medians(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {phase: statistics.median(r.get(phase, 0.0) for r in rows) for phase in PHASES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="directory holding fsdd/")
    parser.add_argument("--rounds", type=int, default=4, help="rounds a run (default 4; round 1 dropped)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each variant (default 2)")
    parser.add_argument("--out", required=True, help="the JSON to write")
    args = parser.parse_args()
    torch.set_num_threads(1)
    timings: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    logs: dict[str, list[str]] = {"local": [], "local (uncached)": []}
    with tempfile.TemporaryDirectory() as tmp:
        centralized_dir = None
        for repeat in range(args.repeats):
            for variant in VARIANTS if repeat % 2 == 0 else reversed(VARIANTS):
                run_dir = run_variant(variant, args.rounds, args.data_dir, Path(tmp) / f"r{repeat}")
                timings[variant] += [r for r in read_jsonl(run_dir / "timings.jsonl") if r["round"] > 1]
                if variant in logs:
                    logs[variant].append((run_dir / "metrics.jsonl").read_text())
                centralized_dir = run_dir if variant == "centralized" else centralized_dir
        assert centralized_dir is not None
        samples = samples_per_step(centralized_dir, args.data_dir)
    phases = {variant: medians(rows) for variant, rows in timings.items()}
    fedavg_round = phases["fedavg"]["round_time"]
    report = {
        "benchmark": "reference_rounds",
        "setting": "flea_fsdd, Qua(3), K = 27, 7 clients a round, seed 0, 1 thread",
        "rounds": args.rounds,
        "repeats": args.repeats,
        "note": "medians over rounds 2.. of every repeat; the machine may be shared (see loadavg)",
        **machine_facts(torch.device("cpu")),
        "median_s": phases,
        "ratio_to_fedavg": {v: p["round_time"] / fedavg_round for v, p in phases.items()},
        "local_metrics_identical": logs["local"] == logs["local (uncached)"],
        "samples_per_step": samples,
    }
    write_report(args.out, report, echo=True)


if __name__ == "__main__":
    main()
