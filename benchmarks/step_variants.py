"""Which variant of a local step and of a test-set evaluation is faster, side by side in one process -> JSON.

One question per ``--compare`` (they were three scripts: ``channels_last.py``, ``precision_step.py`` and
``eval_batch.py``; each writes the JSON its old script wrote, so the committed results read the same):

* ``memory_format``: the model in ``torch.contiguous_format`` vs ``torch.channels_last`` (inputs stay NCHW,
  as in the engine's ``engine.channels_last``): one training step of ``--train-batch`` images (default 32;
  forward, CE, backward, Adam) and
  one evaluation pass of the test-set size, per model of ``--models`` ->
  ``benchmarks/results/channels_last.json``;
* ``precision``: float32 vs bf16 autocast, the step through the real
  :func:`fedaug.training.loop.train_local` (one epoch over one batch of 32) and the real
  :func:`fedaug.engine.evaluation.evaluate`, first model of ``--models`` ->
  ``benchmarks/results/precision_step_harnet.json``;
* ``eval_batch``: :func:`~fedaug.engine.evaluation.evaluate` with each batch size of ``--batches``
  (``engine.eval_batch_size``, default 1024), contiguous and channels-last, first model of ``--models`` ->
  ``benchmarks/results/eval_batch.json``.

The variants alternate in interleaved repeats so that load from other processes hits all alike (one
unmeasured warm-up first: oneDNN's kernel choice); medians are reported, and a speed-up > 1 means the second
variant is faster. Inputs and weights are made on the CPU from seed 0, then moved to ``--device``.

Usage::

    python benchmarks/step_variants.py --compare memory_format         # HARNet and bn_cnn_mnist
    python benchmarks/step_variants.py --compare precision --models bn_cnn_mnist
    python benchmarks/step_variants.py --compare eval_batch --device cuda --batches 1024 8192 --out x.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from fedaug.api import ClientData, TrainSettings
from fedaug.engine.evaluation import evaluate
from fedaug.models import build_model
from fedaug.training.loop import cross_entropy_loss, train_local
from machine import (  # benchmarks/ is the script's directory
    add_device_argument,
    benchmark_device,
    machine_facts,
    write_report,
)
from machine import clock as wall_clock

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = {
    "harnet": ((1, 128, 3), 6, 2947),
    "bn_cnn_mnist": ((1, 28, 28), 10, 10000),
    "bn_cnn_cifar": ((3, 32, 32), 10, 10000),
    "lenet5": ((3, 32, 32), 10, 10000),
    "audionet": ((2, 64, 344), 10, 873),
}
"""Input shape, classes and test-set size of each model (UCI-HAR, Fashion-MNIST, CIFAR-10 for the BN CNN and
the 3-channel LeNet-5 of the CIFAR-10 stand-in grids, one UrbanSound8K fold)."""
DEFAULT_MODELS = ["harnet", "bn_cnn_mnist"]
FORMATS = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}
NOTE = "medians of interleaved repeats in one process; the machine may be shared (see loadavg)"
Timer = Callable[[], float]
CLOCKS: dict[str, Callable[[torch.device], float]] = {
    "wall": wall_clock,
    "thread": lambda device: time.thread_time(),
}
"""``--clock``: wall time, or the CPU time of this thread (a 1-thread CPU benchmark on cores that other
processes share: time spent waiting for a core is not counted, cache contention still is)."""
_CLOCK = [wall_clock]


def clock(device: torch.device) -> float:
    """The ``--clock`` chosen (wall time unless ``--clock thread``)."""
    return _CLOCK[0](device)


def interleaved(timers: dict[str, Timer], repeats: int) -> dict[str, float]:
    """Median seconds of each timer over ``repeats`` rounds that call every timer once, after one warm-up."""
    for timer in timers.values():
        timer()
    samples: dict[str, list[float]] = {name: [] for name in timers}
    for _ in range(repeats):
        for name, timer in timers.items():
            samples[name].append(timer())
    return {name: statistics.median(values) for name, values in samples.items()}


def inputs(
    name: str, device: torch.device, test_size: int | None = None, batch: int = 32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A training batch (default 32) and a test set (``test_size``, default the dataset's) of ``name``'s
    shapes (labels cycle through the classes)."""
    shape, classes, full_size = MODELS[name]
    test_size = test_size or full_size
    gen = torch.Generator().manual_seed(0)
    x, test_x = torch.randn(batch, *shape, generator=gen), torch.randn(test_size, *shape, generator=gen)
    y, test_y = torch.arange(batch) % classes, torch.arange(test_size) % classes
    return x.to(device), y.to(device), test_x.to(device), test_y.to(device)


def models_by_format(name: str, device: torch.device) -> dict[str, torch.nn.Module]:
    """``name`` with the same weights (seed 0) in each memory format of :data:`FORMATS`."""
    shape, classes, _ = MODELS[name]
    torch.manual_seed(0)
    base = build_model(name, num_classes=classes, input_shape=shape)
    models = {}
    for fmt, memory_format in FORMATS.items():
        model = build_model(name, num_classes=classes, input_shape=shape)
        model.load_state_dict(base.state_dict())
        models[fmt] = model.to(device).to(memory_format=memory_format)  # type: ignore[call-overload]
    return models


def adam_steps_s(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int) -> float:
    """Median seconds of a bare step (forward, CE, backward, Adam) over ``steps`` steps."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    times = []
    for _ in range(steps):
        start = clock(x.device)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        times.append(clock(x.device) - start)
    return statistics.median(times)


@torch.inference_mode()
def bare_eval_s(model: torch.nn.Module, x: torch.Tensor) -> float:
    model.eval()
    start = clock(x.device)
    for i in range(0, x.shape[0], 1024):
        model(x[i : i + 1024])
    return clock(x.device) - start


def memory_format(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    report: dict[str, Any] = {"threads": torch.get_num_threads(), "note": NOTE, **machine_facts(device)}
    report["models"] = {name: memory_format_of(name, args, device) for name in args.models}
    return report


def memory_format_of(name: str, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    x, y, test_x, _ = inputs(name, device, args.test_size, args.train_batch)
    models = models_by_format(name, device)
    step = interleaved(
        {f: lambda m=m: adam_steps_s(m, x, y, args.steps) for f, m in models.items()}, args.repeats
    )
    ev = interleaved({f: lambda m=m: bare_eval_s(m, test_x) for f, m in models.items()}, args.repeats)
    return {
        "input_shape": list(MODELS[name][0]),
        "train_batch": args.train_batch,
        "step_ms": {f: 1000 * s for f, s in step.items()},
        "eval_s": ev,
        "speedup_step": step["contiguous"] / step["channels_last"],
        "speedup_eval": ev["contiguous"] / ev["channels_last"],
    }


def precision(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    name = args.models[0]
    shape, classes, _ = MODELS[name]
    x, y, test_x, test_y = inputs(name, device, args.test_size)
    data = ClientData(0, x, y, classes)
    model = build_model(name, num_classes=classes, input_shape=shape).to(device)

    def step_s(kind: str) -> float:
        settings = TrainSettings(local_epochs=1, batch_size=data.num_examples, precision=kind)
        times = []
        for i in range(args.steps):
            gen = torch.Generator().manual_seed(i)
            start = clock(device)
            train_local(model, data, loss_fn=cross_entropy_loss, settings=settings, generator=gen)
            times.append(clock(device) - start)
        return statistics.median(times)

    def eval_s(kind: str) -> float:
        start = clock(device)
        evaluate(model, test_x, test_y, num_classes=classes, batch_size=1024, precision=kind)
        return clock(device) - start

    kinds = ("float32", "bf16")
    step = interleaved({k: lambda k=k: step_s(k) for k in kinds}, args.repeats)
    ev = interleaved({k: lambda k=k: eval_s(k) for k in kinds}, args.repeats)
    return {
        "model": name,
        "input_shape": list(shape),
        "threads": torch.get_num_threads(),
        "batch_size": 32,
        "test_size": int(test_x.shape[0]),
        "step_ms": {k: 1000 * s for k, s in step.items()},
        "eval_s": ev,
        "speedup_step": step["float32"] / step["bf16"],
        "speedup_eval": ev["float32"] / ev["bf16"],
        "note": NOTE,
        **machine_facts(device),
    }


def eval_batch(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    name = args.models[0]
    _, classes, _ = MODELS[name]
    _, _, test_x, test_y = inputs(name, device, args.test_size)
    models = models_by_format(name, device)

    def eval_s(fmt: str, batch: int) -> float:
        start = clock(device)
        evaluate(models[fmt], test_x, test_y, num_classes=classes, batch_size=batch)
        return clock(device) - start

    timers = {f"{f}/{b}": lambda f=f, b=b: eval_s(f, b) for f in models for b in args.batches}
    return {
        "model": name,
        "test_size": int(test_x.shape[0]),
        "threads": torch.get_num_threads(),
        "note": NOTE,
        **machine_facts(device),
        "eval_s": interleaved(timers, args.repeats),
    }


COMPARISONS: dict[str, tuple[Callable[[argparse.Namespace, torch.device], dict[str, Any]], str]] = {
    "memory_format": (memory_format, "channels_last.json"),
    "precision": (precision, "precision_step_harnet.json"),
    "eval_batch": (eval_batch, "eval_batch.json"),
}
"""What each ``--compare`` runs, and its default result file under ``benchmarks/results``."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", required=True, choices=list(COMPARISONS), help="the question")
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS, choices=list(MODELS))
    parser.add_argument("--train-batch", type=int, default=32, help="memory_format's training batch")
    parser.add_argument("--batches", type=int, nargs="+", default=[256, 1024, 2947], help="eval_batch's")
    parser.add_argument("--test-size", type=int, help="test-set size (default: the dataset's, e.g. 2947)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="training steps per repeat")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=list(CLOCKS), default="wall", help="wall (default) or thread")
    parser.add_argument("--out", help="JSON file (default: benchmarks/results/<the comparison's file>)")
    add_device_argument(parser)
    args = parser.parse_args()
    device = benchmark_device(args.device)
    torch.set_num_threads(args.threads)
    if args.clock == "thread" and (device.type != "cpu" or args.threads != 1):
        parser.error("--clock thread needs --device cpu and --threads 1 (other threads' work is not counted)")
    _CLOCK[0] = CLOCKS[args.clock]
    run, default_out = COMPARISONS[args.compare]
    report = run(args, device)
    clock = {"clock": args.clock} if args.clock != "wall" else {}  # the old files are wall time, unnamed
    write_report(args.out or RESULTS / default_out, {**report, **clock}, echo=True)


if __name__ == "__main__":
    main()
