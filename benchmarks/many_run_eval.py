"""Does evaluating R runs' models in one stacked pass beat R separate evaluations? -> JSON.

Packed runs of one preset (other seeds or splits) evaluate models of the same architecture on the same test
set, each in its own process today. This probe asks what one process could gain by evaluating them together:
the R models' weights and buffers stacked (``torch.func.stack_module_state``) and one
``torch.func.vmap`` of ``torch.func.functional_call`` per test batch, in eval mode (BatchNorm on its running
statistics), against R evaluations one model after the other, each as the engine's
(:func:`fedaug.engine.evaluation.evaluate`: batches of ``--eval-batch``, no autograd, logits argmax).

Models (``--model``), on random data of the test set's shape:

* ``harnet``: HARNet on UCI-HAR's test set, 2947 windows of ``[1, 128, S]`` (``--sensors``, default 9), 6
  classes;
* ``mobilenet``: MobileNetV2 (CIFAR variant) on CIFAR-10's test set, 10000 images ``[3, 32, 32]``, 10 classes.

Before timing, it checks that the stacked pass computes what the separate ones do: in float64 on the first
``--check-samples`` samples, the largest logit difference (must be below 1e-9), and in float32 on every timed
sample, the fraction of predictions (argmax) that agree (reported; must be 1.0 unless logits tie within
float32 rounding). Then, for each R of ``--runs`` (default 1 4 16), ``--repeats`` interleaved timings of both
ways (separate, stacked), the median of each, and the speed-up (separate / stacked). ``--samples`` cuts the
test set (the CPU result uses it; a GPU takes the whole set). Runs never enter the engine here: it is a probe.

Usage::

    python benchmarks/many_run_eval.py --device cuda --out /tmp/many_run_eval.json          # both models
    python benchmarks/many_run_eval.py --device cpu --model harnet --samples 512 --repeats 2 \\
        --out benchmarks/results/many_run_eval_cpu.json
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap

from fedaug.models import build_model
from machine import add_device_argument, benchmark_device, clock, machine_facts, write_report

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class EvalCase:
    """A model and its test set's shape."""

    model: str
    samples: int
    num_classes: int


CASES = {
    "harnet": EvalCase("harnet", 2947, 6),  # UCI-HAR's test set
    "mobilenet": EvalCase("mobilenet_v2_cifar", 10_000, 10),  # CIFAR-10's test set
}


def models(case: EvalCase, shape: tuple[int, ...], runs: int, device: torch.device) -> list[nn.Module]:
    """``runs`` models of ``case``, each with random weights and BatchNorm statistics of its own, in eval
    mode."""
    out = []
    for r in range(runs):
        torch.manual_seed(r)
        model = build_model(case.model, num_classes=case.num_classes, input_shape=shape)
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                if name.endswith("running_mean"):
                    buffer.normal_(0, 0.1)
                elif name.endswith("running_var"):
                    buffer.uniform_(0.5, 2.0)
        out.append(model.to(device).eval())
    return out


@torch.inference_mode()
def separate(models_: list[nn.Module], x: Tensor, batch: int) -> Tensor:
    """Each model's predictions, one model after the other, in batches of ``batch``: ``[R, N]``."""
    return torch.stack(
        [torch.cat([m(x[s : s + batch]).argmax(1) for s in range(0, x.shape[0], batch)]) for m in models_]
    )


class Stacked:
    """R models of one architecture as one: their weights and buffers stacked, one vmapped
    ``functional_call`` per batch."""

    def __init__(self, models_: list[nn.Module]) -> None:
        self.params, self.buffers = stack_module_state(models_)  # type: ignore[arg-type]
        base = copy.deepcopy(models_[0]).to("meta")

        def logits(p: dict[str, Tensor], b: dict[str, Tensor], x: Tensor) -> Tensor:
            return functional_call(base, (p, b), (x,))

        self.per_model = vmap(logits, in_dims=(0, 0, None))

    @torch.inference_mode()
    def logits(self, x: Tensor) -> Tensor:
        """Every model's logits on ``x``: ``[R, N, classes]``."""
        return self.per_model(self.params, self.buffers, x)

    def predict(self, x: Tensor, batch: int) -> Tensor:
        """Every model's predictions, in batches of ``batch`` per model: ``[R, N]``."""
        return torch.cat([self.logits(x[s : s + batch]).argmax(2) for s in range(0, x.shape[0], batch)], 1)


def check(case: EvalCase, shape: tuple[int, ...], device: torch.device, samples: int) -> float:
    """Largest logit difference between the stacked pass and separate passes in float64, 3 models."""
    models64 = [m.double() for m in models(case, shape, 3, device)]
    x = torch.randn(samples, *shape, generator=torch.Generator().manual_seed(7)).double().to(device)
    with torch.inference_mode():
        one_by_one = torch.stack([m(x) for m in models64])
    return float((one_by_one - Stacked(models64).logits(x)).abs().max())


def interleaved(
    ways: dict[str, Callable[[], Any]], device: torch.device, repeats: int
) -> dict[str, list[float]]:
    """Seconds of each way, ``repeats`` times, the ways alternating (load from others hits all alike)."""
    times: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(repeats):
        for way, fn in ways.items():
            start = clock(device)
            fn()
            times[way].append(clock(device) - start)
    return times


def bench(case_name: str, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    case = CASES[case_name]
    shape = (1, 128, args.sensors) if case_name == "harnet" else (3, 32, 32)
    samples = min(args.samples or case.samples, case.samples)
    diff = check(case, shape, device, args.check_samples)
    if diff > 1e-9:
        raise SystemExit(
            f"many_run_eval.py: stacked logits differ from separate ones by {diff:.3g} in float64"
        )
    x = torch.randn(samples, *shape, generator=torch.Generator().manual_seed(1)).to(device)
    rows = []
    for runs in args.runs:
        models_ = models(case, shape, runs, device)
        together = Stacked(models_)
        agree = float(
            (separate(models_, x, args.eval_batch) == together.predict(x, args.eval_batch)).float().mean()
        )
        ways = {
            "separate": partial(separate, models_, x, args.eval_batch),
            "stacked": partial(together.predict, x, args.eval_batch),
        }
        times = interleaved(ways, device, args.repeats)
        sep, stk = statistics.median(times["separate"]), statistics.median(times["stacked"])
        rows.append(
            {
                "runs": runs,
                "separate_s": round(sep, 4),
                "stacked_s": round(stk, 4),
                "speedup": round(sep / stk, 3),
                "samples_per_s_separate": round(runs * samples / sep, 1),
                "samples_per_s_stacked": round(runs * samples / stk, 1),
                "float32_argmax_agreement": agree,
                "times_s": {k: [round(t, 4) for t in v] for k, v in times.items()},
            }
        )
        print(
            f"{case_name} R={runs}: separate {sep:.3f} s, stacked {stk:.3f} s, agreement {agree}", flush=True
        )
    return {
        "model": case.model,
        "input_shape": list(shape),
        "samples": samples,
        "float64_max_logit_diff": diff,
        "rows": rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_device_argument(parser)
    parser.add_argument("--model", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 4, 16], help="models evaluated at once")
    parser.add_argument("--samples", type=int, default=0, help="cut the test set to N samples (0: all)")
    parser.add_argument("--sensors", type=int, default=9, help="HARNet's sensor channels (default 9)")
    parser.add_argument("--eval-batch", type=int, default=1024, help="test batch per model (the engine's)")
    parser.add_argument("--check-samples", type=int, default=64, help="samples of the float64 check")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args()
    if bad := [r for r in args.runs if r < 1]:
        parser.error(f"--runs must be at least 1, got {bad[0]}")
    device = benchmark_device(args.device)
    torch.set_num_threads(args.threads)
    report: dict[str, Any] = {
        "benchmark": "many_run_eval",
        "command": " ".join(["python", *sys.argv]),
        **machine_facts(device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "eval_batch": args.eval_batch,
        "repeats": args.repeats,
        "note": "medians of interleaved repeats; the machine may be shared (see loadavg)",
        "cases": [],
    }
    for name in args.model:
        report["cases"].append(bench(name, args, device))
        write_report(args.out, report, echo=False)  # after each model: partial results if cut short
    return 0


if __name__ == "__main__":
    sys.exit(main())
