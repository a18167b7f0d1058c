"""Where the float32 gap of padded batched clients on the default preset comes from: three probes, one JSON.

Run from the repository root (``python studies/speed/padded_float32.py``; about 3 minutes at one thread);
writes ``studies/speed/padded_float32.json``. Round 1 of the default preset (HARNet, UCI-HAR), FedAvg:

* ``first_step``: one client's gradient on its first 32 samples in float32 and float64, and per parameter
  how many elements Adam's first step (lr·g/(|g| + 1e-8), lr 1e-3) moves differently by more than lr/10
  (``flips``), with the largest float64 |g| among them and the parameter's median |g|;
* ``gradient_error``: one padded step of two clients (17 and 32 samples: the first padded with 15 rows) and
  the same clients' sequential gradients, each in float32, against float64, per parameter; the padded step
  once with its masked BatchNorm as written (float32 arithmetic) and once summing in float64;
* ``drift_bn_float64``: ``benchmarks/batched_drift.py``'s one-epoch run at lr 1e-4 (round 1's first two
  clients) with the masked BatchNorm summing in float64 (``batched_drift_harnet_lr1e-4.json`` is the same run
  as written).
"""

from __future__ import annotations

import contextlib
import copy
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import batched_drift  # noqa: E402
from batched_clients import round_one  # noqa: E402
from fedaug.api import TrainSettings  # noqa: E402
from fedaug.engine.batched import padded  # noqa: E402
from fedaug.engine.batched.padded import PaddedBatches, PaddedStep  # noqa: E402
from fedaug.training.loop import as_batchable  # noqa: E402
from machine import machine_facts  # noqa: E402

OVERRIDES = ["method.name=fedavg", "engine.device=cpu", "engine.progress=false"]


def _forward_float64(self: Any, x: Tensor) -> Tensor:
    """``padded._MaskedForward.__call__`` with its sums in float64 (the result cast back)."""
    m, dims = self.module, [0, *range(2, x.dim())]
    shape = [1, -1, *[1] * (x.dim() - 2)]
    w = self.mask.view(-1, *[1] * (x.dim() - 1)).double()
    count = self.mask.double().sum() * (x[0].numel() // x.shape[1])
    centred = x.double() - ((x.double() * w).sum(dims) / count.clamp(min=1)).view(shape)
    var = (centred * centred * w).sum(dims) / count.clamp(min=1)
    out = (centred * torch.rsqrt(var + m.eps).view(shape)).to(x.dtype) * m.weight.view(shape) + m.bias.view(
        shape
    )
    real = count > 0
    with torch.no_grad():
        batch_mean = ((x.double() * w).sum(dims) / count.clamp(min=1)).to(x.dtype)
        unbiased = (var * count / (count - 1).clamp(min=1)).to(x.dtype)
        m.running_mean.copy_(
            torch.where(real, torch.lerp(m.running_mean, batch_mean, m.momentum), m.running_mean)
        )
        m.running_var.copy_(torch.where(real, torch.lerp(m.running_var, unbiased, m.momentum), m.running_var))
        m.num_batches_tracked.add_(real.to(m.num_batches_tracked.dtype))
    return out


@contextlib.contextmanager
def bn_float64(on: bool) -> Iterator[None]:
    original = padded._MaskedForward.__call__
    if on:
        padded._MaskedForward.__call__ = _forward_float64  # type: ignore[method-assign]
    try:
        yield
    finally:
        padded._MaskedForward.__call__ = original  # type: ignore[method-assign]


def first_step() -> dict[str, Any]:
    _, _, _, sim, payload, sampled = round_one(["default"], OVERRIDES)
    grads = {}
    for dtype in (torch.float32, torch.float64):
        ctx = sim._client_context(sampled[0], 1, "client")
        model = copy.deepcopy(ctx.model).to(dtype)
        model.load_state_dict(
            {k: v.to(dtype) if v.is_floating_point() else v for k, v in payload.model_state.items()}
        )
        model.train()
        F.cross_entropy(model(ctx.data.x[:32].to(dtype)), ctx.data.y[:32]).backward()
        grads[dtype] = {k: p.grad.double() for k, p in model.named_parameters() if p.grad is not None}
    lr, out = 1e-3, {}
    for k, g64 in grads[torch.float64].items():
        g32 = grads[torch.float32][k]
        moved = (lr * g64 / (g64.abs() + 1e-8) - lr * g32 / (g32.abs() + 1e-8)).abs() > lr / 10
        out[k] = {
            "elements": g64.numel(),
            "flips": int(moved.sum()),
            "largest_float64_abs_grad_of_flips": float(g64[moved].abs().max()) if moved.any() else None,
            "median_abs_grad": float(g64.abs().median()),
        }
    return out


def gradient_error(float64_sums: bool) -> dict[str, Any]:
    _, _, method, sim, payload, sampled = round_one(["default"], OVERRIDES)
    loss = as_batchable(method.loss_fn(payload, sim._client_context(sampled[0], 1, "client")))
    assert loss is not None
    settings = TrainSettings(batch_size=32, lr=1e-3)
    results: dict[torch.dtype, tuple[list[dict[str, Tensor]], list[dict[str, Tensor]]]] = {}
    for dtype in (torch.float32, torch.float64):
        contexts = [sim._client_context(c, 1, "client") for c in sampled[:2]]
        model = copy.deepcopy(contexts[0].model).to(dtype)
        model.load_state_dict(
            {k: v.to(dtype) if v.is_floating_point() else v for k, v in payload.model_state.items()}
        )
        model.train()
        xs = [c.data.x[:n].to(dtype) for c, n in zip(contexts, (17, 32), strict=True)]
        ys = [c.data.y[:n] for c, n in zip(contexts, (17, 32), strict=True)]
        sequential = []
        for x, y in zip(xs, ys, strict=True):
            local = copy.deepcopy(model)
            F.cross_entropy(local(x), y).backward()
            sequential.append({k: p.grad.double() for k, p in local.named_parameters() if p.grad is not None})
        batches = PaddedBatches.of([[(x, y, {})] for x, y in zip(xs, ys, strict=True)])
        step = PaddedStep(copy.deepcopy(model), loss, {}, batches, settings)
        step.load(model, {}, settings)
        step.fill(batches, 0)
        with bn_float64(float64_sums):
            grads, _ = step.step_fn(
                step.params.views(step.params.rows),
                step.rest,
                step.x,
                step.y,
                step.mask,
                step.client,
                step.step,
            )
        results[dtype] = (sequential, [{k: v[c].double() for k, v in grads.items()} for c in range(2)])
    reference = results[torch.float64][0]
    out = {}
    for k in reference[0]:

        def error(states: list[dict[str, Tensor]], key: str = k) -> float:
            return max(float((a[key] - r[key]).abs().max()) for a, r in zip(states, reference, strict=True))

        out[k] = {
            "float64_scale": max(float(r[k].abs().max()) for r in reference),
            "sequential_float32_error": error(results[torch.float32][0]),
            "padded_float32_error": error(results[torch.float32][1]),
            "padded_float64_vs_sequential_float64": error(results[torch.float64][1]),
        }
    return out


def main() -> None:
    torch.set_num_threads(1)
    report: dict[str, Any] = {
        "command": "python studies/speed/padded_float32.py",
        **machine_facts(torch.device("cpu")),
    }
    report["first_step"] = first_step()
    report["gradient_error"] = {
        "masked_bn_float32": gradient_error(False),
        "masked_bn_float64_sums": gradient_error(True),
    }
    with bn_float64(True):
        run = batched_drift.drift(
            ["default"], [*OVERRIDES, "train.local_epochs=1", "train.lr=0.0001"], 2, ["padded"], 0
        )
    report["drift_bn_float64"] = {
        k: run[k] for k in ("lr", "local_epochs", "client_samples", "max_abs_param_diff")
    }
    path = Path(__file__).with_suffix(".json")
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
