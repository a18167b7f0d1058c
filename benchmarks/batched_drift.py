"""How far batched clients drift from the sequential loop, against float32's own error, on a real preset.

Over long client runs the parameters of ``engine.batched_clients`` (``true``: vmap; ``padded``) and of the
sequential loop drift apart in float32 (studies/speed/README.md, docs/guide/gpu.md). This script tells a
difference in the algorithm from rounding: it trains round 1's first clients of a preset with the sequential
loop and with each batched trainer (``--trainers``), each in float32 and in float64, from the same initial
weights and batches, and reports the largest difference (weights and buffers) of every pair, and per state
entry (``per_key``) the float32 gap of each trainer from the sequential loop beside the float32 sequential
loop's own gap from float64, absolute and relative to the entry's largest magnitude. If batched and
sequential agree to ~1e-13 in float64 while, entry by entry, the float32 sequential loop is about as far from
its own float64 result as the batched one is from it, the float32 drift is rounding amplified by training,
not a defect of the batched path. ``--samples 32 --epochs 1`` cuts each client to one batch: one step.

Usage::

    python benchmarks/batched_drift.py                      # the Fed-ZDA preset (BN CNN, SGD, batch 10)
    python benchmarks/batched_drift.py default --epochs 1 --samples 32 --trainers vmap padded
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
from fedaug.engine.batched.modes import BATCHED_MODES
from fedaug.engine.batched.stacked import train_round_batched
from fedaug.types import StateDict
from machine import add_device_argument, benchmark_device, machine_facts, write_report

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
DTYPES = {"float32": torch.float32, "float64": torch.float64}
TRAINERS: dict[str, bool | str] = {"vmap": True, "padded": "padded"}  # -> engine.batched_clients


def drift(
    configs: list[str], overrides: list[str], clients: int, trainers: list[str], samples: int
) -> dict[str, Any]:
    """Largest difference between each pair of (sequential, each trainer) x (float32, float64), and the
    float32 gaps per state entry."""
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
                keep = slice(0, samples or None)
                data = replace(ctx.data, x=ctx.data.x[keep].to(dtype), y=ctx.data.y[keep])
                out.append(replace(ctx, data=data, model=ctx.model.to(dtype)))
            return out

        states[f"sequential_{dtype_name}"] = [method.client_update(typed, c).model_state for c in contexts()]
        for name in trainers:
            trainer = BATCHED_MODES[TRAINERS[name]].trainer
            batched = train_round_batched(method, typed, contexts(), trainer)
            states[f"{name}_{dtype_name}"] = [u.model_state for u in batched]
    names = list(states)
    pairs = {
        f"{a} vs {b}": _max_diff(states[a], states[b]) for i, a in enumerate(names) for b in names[i + 1 :]
    }
    own = _per_key(states["sequential_float64"], states["sequential_float32"])
    per_key = {
        k: {
            "float32_own_error": own[k],
            **{n: _per_key(states["sequential_float32"], states[f"{n}_float32"])[k] for n in trainers},
        }
        for k in own
    }
    return {
        "model": config.model.name,
        "optimizer": config.train.optimizer,
        "lr": config.train.lr,
        "batch_size": config.train.batch_size,
        "local_epochs": config.train.local_epochs,
        "clients": len(chosen),
        "client_samples": [int(min(spec.run.client_sizes[c], samples or 10**9)) for c in chosen],
        "max_abs_param_diff": pairs,
        "integer_entries_equal": all(
            torch.equal(a[k], b[k])
            for states_ in states.values()
            for a, b in zip(states["sequential_float32"], states_, strict=True)
            for k in a
            if not a[k].is_floating_point()
        ),
        "per_key": per_key,
    }


def _per_key(reference: list[StateDict], other: list[StateDict]) -> dict[str, list[float]]:
    """Per floating state entry: [largest absolute difference over clients, that relative to the entry's
    largest magnitude in ``reference``]."""
    out = {}
    for k in reference[0]:
        if not reference[0][k].is_floating_point():
            continue
        diff = max(
            float((a[k].double() - b[k].double()).abs().max()) for a, b in zip(reference, other, strict=True)
        )
        scale = max(float(a[k].double().abs().max()) for a in reference)
        out[k] = [diff, diff / max(scale, 1e-30)]
    return out


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
    parser.add_argument("--trainers", nargs="+", choices=list(TRAINERS), default=["vmap"])
    parser.add_argument(
        "--samples", type=int, default=0, help="cut each client to its first N samples (0: all)"
    )
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "batched_drift.json"))
    add_device_argument(parser)
    args = parser.parse_args()
    device = benchmark_device(args.device)
    torch.set_num_threads(1)
    data = [f"data.data_dir={SHARED_DATA}"] if (SHARED_DATA / "fashion_mnist").is_dir() else []
    base = [*data, "method.name=fedavg", *args.overrides, f"engine.device={device}"]
    result = {
        **machine_facts(device),
        "runs": [
            drift(args.configs, [*base, f"train.local_epochs={e}"], args.clients, args.trainers, args.samples)
            for e in args.epochs
        ],
    }
    write_report(args.out, result, echo=True)


if __name__ == "__main__":
    main()
