"""How far batched clients drift from the sequential loop, against float32's own error, on a real preset.

Over long client runs the parameters of ``engine.batched_clients`` and of the sequential loop drift apart in
float32 (studies/speed/README.md). This script tells a difference in the algorithm from rounding: it
trains round 1's first clients of a preset four ways (sequential and batched, each in float32 and in
float64, from the same initial weights and batches) and reports the largest parameter difference of every
pair. If batched and sequential agree to ~1e-13 in float64 while the float32 sequential loop is as far from
its own float64 result as the batched one, the float32 drift is rounding amplified by training, not a
defect of the batched path. Writes JSON.

Usage::

    python benchmarks/batched_drift.py                      # the Fed-ZDA preset (BN CNN, SGD, batch 10)
    python benchmarks/batched_drift.py --epochs 1 2 --clients 2
    python benchmarks/batched_drift.py --device cuda --out /tmp/drift_cuda.json
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from batched_clients import round_one  # benchmarks/ is the script's directory
from fedaug.api import ClientContext
from fedaug.engine.batched import train_round_batched
from fedaug.types import StateDict
from machine import add_device_argument, benchmark_device, machine_facts, write_report

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def drift(configs: list[str], overrides: list[str], clients: int) -> dict[str, Any]:
    """Largest parameter difference between each pair of (sequential, batched) x (float32, float64)."""
    config, prepared, method, sim, payload, sampled = round_one(configs, overrides)
    spec = prepared.spec
    chosen = sampled[:clients]
    states: dict[str, list[StateDict]] = {}
    for dtype_name, dtype in DTYPES.items():
        cast = {k: v.to(dtype) if v.is_floating_point() else v for k, v in payload.model_state.items()}
        typed = replace(payload, model_state=cast)

        def contexts(dtype: torch.dtype = dtype) -> list[ClientContext]:  # fresh generators each time
            out = []
            for c in chosen:
                ctx = sim._client_context(c, 1, "client")
                data = replace(ctx.data, x=ctx.data.x.to(dtype))
                out.append(replace(ctx, data=data, model=ctx.model.to(dtype)))
            return out

        states[f"sequential_{dtype_name}"] = [method.client_update(typed, c).model_state for c in contexts()]
        batched = train_round_batched(method, typed, contexts())
        states[f"batched_{dtype_name}"] = [u.model_state for u in batched]
    names = list(states)
    pairs = {
        f"{a} vs {b}": _max_diff(states[a], states[b]) for i, a in enumerate(names) for b in names[i + 1 :]
    }
    return {
        "model": config.model.name,
        "optimizer": config.train.optimizer,
        "lr": config.train.lr,
        "batch_size": config.train.batch_size,
        "local_epochs": config.train.local_epochs,
        "clients": len(chosen),
        "client_sizes": [spec.run.client_sizes[c] for c in chosen],
        "max_abs_param_diff": pairs,
    }


def _max_diff(a: list[StateDict], b: list[StateDict]) -> float:
    # Conv biases right before a BatchNorm are excluded: their true gradient is zero, so what moves them is
    # float noise (tests/unit/engine/test_batched.py); the network's function does not depend on them.
    return max(
        float((x[k].double() - y[k].double()).abs().max())
        for x, y in zip(a, b, strict=True)
        for k in x
        if x[k].is_floating_point() and not (k.startswith("blocks.") and k.endswith(".0.bias"))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="*", default=[str(REPO / "configs" / "fedzda_fmnist.yaml")])
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--epochs", type=int, nargs="+", default=[1, 2], help="local epochs to try")
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "batched_drift.json"))
    add_device_argument(parser)
    args = parser.parse_args()
    device = benchmark_device(args.device)
    torch.set_num_threads(1)
    data = [f"data.data_dir={SHARED_DATA}"] if (SHARED_DATA / "fashion_mnist").is_dir() else []
    base = [*data, "method.name=fedavg", *args.overrides, f"engine.device={device}"]
    result = {
        **machine_facts(device),
        "runs": [drift(args.configs, [*base, f"train.local_epochs={e}"], args.clients) for e in args.epochs],
    }
    write_report(args.out, result, echo=True)


if __name__ == "__main__":
    main()
