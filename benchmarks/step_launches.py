"""Operations a local step issues, eager vs recorded as a CUDA graph (``engine.cuda_graphs``) -> JSON.

On a GPU nearly every ATen operation that computes is a kernel launch, and for a HARNet step issuing the
launches takes longer than running them (``fedaug.training.step_graphs``). This counts, on any device, the
operations
of every local step of round 2 of the default preset (FedAvg and FLea, whose round 2 mixes with the feature
buffer), without and with ``engine.cuda_graphs``, split by where they run:

* ``loop``: the local training loop's own work (batch gather, batch transform, the loss kept for the
  finiteness check, the logged sums; with graphs, the copies into the recorded step's inputs);
* ``optimizer``: inside ``Optimizer.step`` of the eager loop (counted per tensor on a CPU, whose Adam takes
  one tensor at a time; CUDA's default foreach Adam issues about a dozen launches for all tensors);
* ``recorded``: inside the recorded step (zero_grad, loss hook, backward, Adam), which a GPU replays as one
  launch.

View operations (``detach``, ``view``, slicing) are not counted: they launch nothing. On a CPU the recorded
step runs unrecorded, with the same operations, so the counts are the GPU's (up to the optimizer, above).

With ``--batched`` it counts instead a whole round's local training (round 2, the preset's 5 epochs),
sequential against ``engine.batched_clients`` (:func:`count_batched`): why batched clients launch about as
many kernels as the sequential loop.

Usage::

    python benchmarks/step_launches.py --device cpu --out benchmarks/results/step_ops_cpu.json
    python benchmarks/step_launches.py --device cpu --batched --out benchmarks/results/batched_ops_cpu.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from machine import (  # benchmarks/ is on sys.path
    add_device_argument,
    benchmark_device,
    machine_facts,
    write_report,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import fedaug.engine.batched.stacked as batched_module  # noqa: E402
import fedaug.methods.fedavg as fedavg_module  # noqa: E402
from fedaug.config.load import load_config  # noqa: E402
from fedaug.engine.simulation import Simulation  # noqa: E402
from fedaug.runs.runner import prepare  # noqa: E402
from fedaug.training.step_graphs import StepGraphs  # noqa: E402

DEFAULT = REPO / "configs" / "default.yaml"


class OpCounter(TorchDispatchMode):
    """Counts computing ATen operations by region: ``recorded`` inside a recorded step, else the innermost
    :meth:`region` entered, else ``loop``."""

    def __init__(self) -> None:
        super().__init__()
        self.regions: list[str] = []
        self.counts: Counter[str] = Counter()
        self.active = False
        self.by_name: set[str] = set()  # operations counted as "gather" outside other regions

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if self.active and not func.is_view:
            where = "recorded" if "recorded" in self.regions else self.regions[-1] if self.regions else "loop"
            if func._opname in self.by_name and where == "loop":
                where = "gather"
            self.counts[where] += 1
        return func(*args, **(kwargs or {}))

    @contextmanager
    def region(self, name: str) -> Iterator[None]:
        self.regions.append(name)
        try:
            yield
        finally:
            self.regions.pop()


def count_round(
    method: str, graphs: bool, rounds: int, epochs: int, device: str, out_dir: Path
) -> tuple[Counter[str], int, int]:
    """Operations by region, local steps and clients of the last of ``rounds`` rounds of ``method`` on the
    default preset with ``epochs`` local epochs."""
    overrides = [
        f"method={method}",
        "compare=[]",
        f"train.rounds={rounds}",
        f"train.local_epochs={epochs}",
        f"engine.device={device}",
        "engine.progress=false",
        f"out_dir={out_dir}",
    ]
    config = load_config([DEFAULT], overrides)
    spec = replace(prepare(config, out_dir / "run").spec, cuda_graphs=graphs)  # also on a CPU
    counter = OpCounter()
    steps = {"count": 0}
    per_round = spec.clients_per_round
    calls = {"n": 0}
    original_train = fedavg_module.train_local
    original_step = torch.optim.Adam.step
    original_body = StepGraphs._body

    def train(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        counter.active = calls["n"] > per_round * (rounds - 1)  # the last round's clients only
        try:
            metrics = original_train(*args, **kwargs)
        finally:
            counter.active = False
        if calls["n"] > per_round * (rounds - 1):
            steps["count"] += int(metrics["train/steps"])
        return metrics

    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        with counter.region("optimizer"):
            return original_step(self, *args, **kwargs)

    def body(self: StepGraphs, *args: Any) -> Callable[[], Any]:
        inner = original_body(self, *args)

        def recorded() -> Any:
            with counter.region("recorded"):
                return inner()

        return recorded

    fedavg_module.train_local = train  # type: ignore[assignment]
    torch.optim.Adam.step = step  # type: ignore[method-assign]
    StepGraphs._body = body  # type: ignore[method-assign]
    try:
        with counter:
            Simulation(spec).run()
    finally:
        fedavg_module.train_local = original_train
        torch.optim.Adam.step = original_step  # type: ignore[method-assign]
        StepGraphs._body = original_body  # type: ignore[method-assign]
    return counter.counts, steps["count"], per_round


def count(method: str, graphs: bool, rounds: int, device: str, out_dir: Path) -> dict[str, Any]:
    """Operations per local step and per client (outside its steps: set-up, final read, recording new
    shapes), from the same round with 1 and with 2 local epochs: the same clients and shapes, twice the
    steps."""
    one, steps_one, clients = count_round(method, graphs, rounds, 1, device, out_dir / "e1")
    two, steps_two, _ = count_round(method, graphs, rounds, 2, device, out_dir / "e2")
    regions = sorted(set(one) | set(two))
    per_step = {r: (two[r] - one[r]) / (steps_two - steps_one) for r in regions}
    per_client = {r: (one[r] - per_step[r] * steps_one) / clients for r in regions}
    return {
        "method": method,
        "cuda_graphs": graphs,
        "clients": clients,
        "steps": [steps_one, steps_two],
        "ops_per_step": {r: round(v, 2) for r, v in per_step.items()},
        "ops_per_client": {r: round(v, 1) for r, v in per_client.items()},
    }


def count_batched(method: str, batched: bool, rounds: int, device: str, out_dir: Path) -> dict[str, Any]:
    """Operations of the last round's local training with the preset's epochs, sequential or with
    ``engine.batched_clients``, by region: ``gather`` (a batched call's gathers and scatters of clients'
    rows), ``optimizer`` (Adam; the batched one is functional, one tensor at a time, its state's gathers
    included) and ``loss`` (the rest: batches, forward, backward, sums); batched, also its stacked calls (one
    per group of clients whose batches share a shape)."""
    overrides = [
        f"method={method}",
        "compare=[]",
        f"train.rounds={rounds}",
        f"engine.device={device}",
        f"engine.batched_clients={str(batched).lower()}",
        "engine.progress=false",
        f"out_dir={out_dir}",
    ]
    spec = prepare(load_config([DEFAULT], overrides), out_dir / "run").spec
    counter = OpCounter()
    last = {"on": False, "calls": 0, "steps": 0}
    gathers = {"index_select", "index_copy_"}
    originals = (
        batched_module.train_clients,
        fedavg_module.train_local,
        torch.optim.Adam.step,
        batched_module.FunctionalOptimizer.step,
    )

    def payload(*args: Any, **kwargs: Any) -> Any:
        last["on"] = args[2] == rounds  # (self, state, round_num, train)
        return original_payload(*args, **kwargs)

    def in_round(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            counter.active = last["on"]
            try:
                return fn(*args, **kwargs)
            finally:
                counter.active = False

        return wrapped

    def train_local(*args: Any, **kwargs: Any) -> Any:
        metrics = in_round(originals[1])(*args, **kwargs)
        last["steps"] += int(metrics["train/steps"]) if last["on"] else 0
        return metrics

    def adam(self: Any, *args: Any, **kwargs: Any) -> Any:
        with counter.region("optimizer"):
            return originals[2](self, *args, **kwargs)

    def functional(self: Any, *args: Any, **kwargs: Any) -> Any:
        last["calls"] += 1 if last["on"] else 0
        with counter.region("optimizer"):
            return originals[3](self, *args, **kwargs)

    method_cls = type(spec.method)
    original_payload = method_cls.payload
    method_cls.payload = payload  # type: ignore[method-assign]
    batched_module.train_clients = in_round(originals[0])
    fedavg_module.train_local = train_local  # type: ignore[assignment]
    torch.optim.Adam.step = adam  # type: ignore[method-assign]
    batched_module.FunctionalOptimizer.step = functional  # type: ignore[method-assign]
    counter.by_name = gathers
    try:
        with counter:
            Simulation(spec).run()
    finally:
        method_cls.payload = original_payload  # type: ignore[method-assign]
        batched_module.train_clients = originals[0]
        fedavg_module.train_local = originals[1]
        torch.optim.Adam.step = originals[2]  # type: ignore[method-assign]
        batched_module.FunctionalOptimizer.step = originals[3]  # type: ignore[method-assign]
    ops = dict(counter.counts)
    ops["loss"] = ops.pop("loop", 0)
    row: dict[str, Any] = {"method": method, "mode": "batched" if batched else "sequential", "round_ops": ops}
    row["total"] = sum(ops.values())
    row["stacked_calls" if batched else "client_steps"] = last["calls" if batched else "steps"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_device_argument(parser)
    parser.add_argument("--methods", default="fedavg,flea")
    parser.add_argument("--rounds", type=int, default=2, help="counted: the last round (default 2)")
    parser.add_argument(
        "--batched",
        action="store_true",
        help="instead: a whole round's operations, sequential vs engine.batched_clients",
    )
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args()
    device = benchmark_device(args.device)
    report: dict[str, Any] = {
        "benchmark": "step_launches",
        "preset": "configs/default.yaml",
        **machine_facts(device),
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for method in [m.strip() for m in args.methods.split(",") if m.strip()]:
            for variant in (False, True):
                out_dir = Path(tmp) / f"{method}_{variant}"
                if args.batched:
                    row = count_batched(method, variant, args.rounds, str(device), out_dir)
                else:
                    row = count(method, variant, args.rounds, str(device), out_dir)
                print(json.dumps(row), flush=True)
                rows.append(row)
    report["rows"] = rows
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
