"""Subnormal floats in FedGen's generator training: steps with and without ``engine.flush_denormals``.

Late in a FedGen run on UCI-HAR the global model is so confident on the generated samples (logit gaps of
hundreds) that its softmax probabilities fall below float32's smallest normal number (1.2e-38) and the
backward pass carries subnormals through every layer, which x86 CPUs compute in slow microcode (on one run's
round-100 checkpoint: 1.10 s per generator step, 0.22 s flushed). This reproduces it without a checkpoint:
a randomly initialised HARNet teacher that is as sure of each generated sample's class as the trained model
(``--margin`` added to the logit of the class the sample was generated for, which the benchmark's generator
records; the trained model's logit gaps were 160-2000), and times FedGen's own generator training
(``FedGen._train_generator``) with :func:`fedaug.runtime.precision.flush_denormals` off and on, interleaved
in one
process, one thread. Also reports the share of subnormal entries in the teacher's activation gradients.
``--device cuda`` runs the same on a GPU (whose float32 arithmetic does not slow down on subnormals: the two
timings should agree there; the flush setting is the CPU's).
(Scaling the classifier's weights instead makes large gaps but no subnormals: the backward pass multiplies
the tiny probabilities by the same large weights.)

Usage::

    python benchmarks/fedgen_denormals.py
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedaug.api import RunContext, ServerState
from fedaug.methods.fedgen import ConditionalGenerator, FedGen, FedGenConfig
from fedaug.models import build_model
from fedaug.runtime.precision import flush_denormals
from machine import (  # benchmarks/ is the script's directory
    add_device_argument,
    benchmark_device,
    clock,
    machine_facts,
    write_report,
)

REPO = Path(__file__).resolve().parents[1]
SHAPE, CLASSES = (1, 128, 3), 6


class SureTeacher(nn.Module):
    """``base(x) + margin * onehot(y)``, y: the classes of the batch the generator made last."""

    def __init__(self, base: nn.Module, margin: float) -> None:
        super().__init__()
        self.base, self.margin = base, margin
        self.labels = torch.zeros(0, dtype=torch.long)

    def forward(self, x: Tensor) -> Tensor:
        logits: Tensor = self.base(x)
        return logits + self.margin * F.one_hot(self.labels, logits.shape[1]).to(logits)


class RecordingFedGen(FedGen):
    """FedGen whose generators tell the teacher which classes they were asked for."""

    def __init__(self, config: FedGenConfig, teacher: SureTeacher) -> None:
        super().__init__(config)
        self.teacher = teacher

    def build_generator(self, run: RunContext, generator: torch.Generator) -> ConditionalGenerator:
        gen = super().build_generator(run, generator)

        def record(module: nn.Module, inputs: tuple[Tensor, Tensor]) -> None:
            del module
            self.teacher.labels = inputs[0]

        gen.register_forward_pre_hook(record)
        return gen


def subnormal_share(teacher: SureTeacher, method: FedGen, run: RunContext) -> tuple[float, float]:
    """(share of subnormal entries in the teacher's activation gradients, median logit gap) on one batch."""
    gen = method.build_generator(run, torch.Generator().manual_seed(1))
    grads: list[Tensor] = []

    def keep(module: nn.Module, inputs: object, output: Tensor) -> None:
        del module, inputs
        if output.requires_grad:
            output.register_hook(grads.append)  # type: ignore[no-untyped-call]

    handles = [m.register_forward_hook(keep) for m in teacher.base.modules()]
    y = (torch.arange(64) % CLASSES).to(run.device)
    logits = teacher(gen(y, torch.randn(64, method.config.noise_dim).to(run.device)))
    F.cross_entropy(logits, y).backward()  # type: ignore[no-untyped-call]
    for handle in handles:
        handle.remove()
    tiny = torch.finfo(torch.float32).tiny
    sub = sum(int(((g != 0) & (g.abs() < tiny)).sum()) for g in grads)
    gap = (logits.max(dim=1).values - logits.min(dim=1).values).median()
    return sub / sum(g.numel() for g in grads), float(gap.detach())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--margin", type=float, default=95.0, help="logit margin of the generated class")
    parser.add_argument("--steps", type=int, default=10, help="generator steps per timing")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "denormals.json"))
    add_device_argument(parser)
    args = parser.parse_args()
    device = benchmark_device(args.device)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    teacher = SureTeacher(build_model("harnet", num_classes=CLASSES, input_shape=SHAPE), args.margin)
    teacher.to(device).eval()
    teacher.requires_grad_(False)
    method = RecordingFedGen(FedGenConfig(generator_steps=args.steps), teacher)
    run = RunContext(
        num_clients=1, num_classes=CLASSES, input_shape=SHAPE, seed=0, num_rounds=100, device=device
    )
    share, gap = subnormal_share(teacher, method, run)
    state = ServerState(round_num=40, model_state={}, extra={"generator": {}, "metrics": {}})
    times: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(args.repeats + 1):  # the first pass warms up and is dropped
        for mode in times:
            with flush_denormals(mode == "on"):
                start = clock(device)
                method._train_generator(replace(state), teacher, run)
                times[mode].append((clock(device) - start) / args.steps)
    step = {mode: statistics.median(t[1:]) for mode, t in times.items()}
    result = {
        "model": "harnet (random init) + margin on the generated class",
        "margin": args.margin,
        "median_logit_gap": round(gap, 1),
        "subnormal_share_of_activation_grads": round(share, 4),
        "generator_batch": method.config.generator_batch,
        "threads": 1,
        "note": "medians of interleaved repeats in one process; the machine may be shared (see loadavg)",
        **machine_facts(device),
        "step_s": step,
        "speedup_flushed": round(step["off"] / step["on"], 2),
    }
    write_report(args.out, result, echo=True)


if __name__ == "__main__":
    main()
