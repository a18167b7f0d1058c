"""What fusing FLea's head passes saves per local step: time and operations, fused vs separate -> JSON.

FLea's local objective runs the local head on the mixed features, on the local features (the extra CE) and,
in ``flea_official``, on the buffer features (its KL): :mod:`fedaug.methods.flea.head_passes` runs them as one
pass (``FLea.head_passes = "fused"``, the default on a GPU) or one each (``"separate"``, the CPU's default).
This times the real client update (:meth:`FLea.client_update`, round 2 with a non-empty buffer) of one
client of the default preset's shapes (HARNet, UCI-HAR windows ``[1, 128, 3]``, batch 32, Adam) both
ways, interleaved repeat by repeat so that load from other processes hits both alike, and counts the ATen
operations of one step (on a GPU nearly each one is a kernel launch). Medians over repeats; the ratio is
separate / fused time.

Usage::

    python benchmarks/flea_head_passes.py --threads 1 --out benchmarks/results/flea_head_passes_cpu.json
    python benchmarks/flea_head_passes.py --device cuda --out /tmp/flea_head_passes_cuda.json
    python benchmarks/flea_head_passes.py --device cuda --graphs --out /tmp/flea_head_passes_cuda_graphs.json
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fedaug.api import ClientContext, ClientData, Payload, RunContext, TrainSettings
from fedaug.methods.flea.buffer import FLeaBuffer
from fedaug.methods.flea.method import FLea, FLeaConfig, FLeaOfficial
from fedaug.models import build_model
from fedaug.models.base import SplitModel
from fedaug.training.loop import snapshot_state
from machine import add_device_argument, benchmark_device, clock, machine_facts, write_report

METHODS = {"flea": lambda: FLea(FLeaConfig()), "flea_official": FLeaOfficial}
SHAPE = (1, 128, 3)


class _OpCount(TorchDispatchMode):
    """Counts the ATen operations that compute (views excluded: they launch nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not func.is_view:
            self.ops += 1
        return func(*args, **(kwargs or {}))


def client(samples: int, device: torch.device, graphs: bool = False) -> tuple[ClientContext, Payload]:
    """One client of ``samples`` windows and a round-2 payload with a buffer of 10% of 7 such clients."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(samples, *SHAPE, generator=gen).to(device)
    y = torch.randint(0, 6, (samples,), generator=gen).to(device)
    models: dict[str, SplitModel] = {}

    def workspace(key: str) -> SplitModel:
        if key not in models:
            models[key] = build_model("harnet", num_classes=6, input_shape=SHAPE).to(device)
        return models[key]

    state = snapshot_state(workspace("client"))
    with torch.no_grad():
        features = workspace("client").encode(x.repeat(7, 1, 1, 1)[: 7 * samples // 10], 1)
    buffer = FLeaBuffer(features, y.repeat(7)[: features.shape[0]])
    run = RunContext(num_clients=1, num_classes=6, input_shape=SHAPE, seed=0, num_rounds=2)
    data = ClientData(0, x, y, 6)
    ctx = ClientContext(0, 2, data, workspace("client"), torch.Generator(), run, workspace=workspace)
    train = TrainSettings(local_epochs=1, batch_size=32, lr=1e-3, cuda_graphs=graphs)
    return ctx, Payload(round_num=2, model_state=state, train=train, extra=buffer.to_extra())


def timed(method: FLea, ctx: ClientContext, payload: Payload) -> float:
    ctx.generator.manual_seed(0)
    start = clock(ctx.data.x.device)
    method.client_update(payload, ctx)
    return clock(ctx.data.x.device) - start


def ops_per_step(method: FLea, ctx: ClientContext, payload: Payload) -> int:
    """ATen operations of one client update of one step (batch 32)."""
    one = replace(ctx, data=ClientData(0, ctx.data.x[:32], ctx.data.y[:32], 6))
    counter = _OpCount()
    with counter:
        method.client_update(payload, one)
    return counter.ops


def measure(name: str, samples: int, repeats: int, device: torch.device, graphs: bool) -> dict[str, Any]:
    ctx, payload = client(samples, device, graphs)
    variants = {}
    for passes in ("separate", "fused"):
        method = METHODS[name]()
        method.head_passes = passes
        variants[passes] = method
    times: dict[str, list[float]] = {p: [] for p in variants}
    for method in variants.values():  # warm-up
        timed(method, ctx, payload)
    for _ in range(repeats):
        for p, method in variants.items():
            times[p].append(timed(method, ctx, payload))
    steps = -(-samples // 32)
    median = {p: statistics.median(t) for p, t in times.items()}
    return {
        "method": name,
        "steps": steps,
        "ms_per_step": {p: 1000 * m / steps for p, m in median.items()},
        "ops_per_step": {p: ops_per_step(m, ctx, payload) for p, m in variants.items()},
        "speedup_fused": median["separate"] / median["fused"],
        "repeats": repeats,
        "cuda_graphs": graphs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default="flea,flea_official")
    parser.add_argument("--samples", type=int, default=320, help="client size (default: 10 steps of 32)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--graphs", action="store_true", help="steps recorded as CUDA graphs (on a GPU)")
    parser.add_argument("--out", default="benchmarks/results/flea_head_passes.json")
    add_device_argument(parser)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = benchmark_device(args.device)
    cases = [measure(m, args.samples, args.repeats, device, args.graphs) for m in args.methods.split(",")]
    command = (
        "python benchmarks/flea_head_passes.py "
        + " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in vars(args).items()
            if k not in ("out", "graphs") and v is not None
        )
        + (" --graphs" if args.graphs else "")
    )
    write_report(
        args.out,
        {"command": command, "threads": torch.get_num_threads(), "cases": cases, **machine_facts(device)},
        echo=True,
    )


if __name__ == "__main__":
    main()
