"""Conv-net client steps on one device, mode by mode, against the same model's large-batch floor -> rows.

``benchmarks/gpu.py --preset <name>`` runs this for the CIFAR-10 presets (:data:`PRESETS`): MobileNetV2 (CIFAR
variant, FLea Table 1), ResNet-18 and ResNet-50 (Fed-AugMix Table III). A whole run of these presets takes
hours, so instead of runs it times local steps (forward, cross-entropy, backward, Adam) at the papers' batch
size on random images of the dataset's shape, in each mode of :data:`MODES`:

* ``eager`` (float32), ``channels_last``, ``bf16`` (autocast), ``bf16_channels_last``;
* ``graphs``: the step recorded once as a CUDA graph (capturable fused Adam) and replayed;
* ``batched``: ``--clients`` clients in one stacked step (:class:`fedaug.engine.batched.padded.PaddedStep`,
vmap over
  the clients' weights, BatchNorm per client), ``batched_graphs`` that step recorded as one CUDA graph;
* ``packed``: ``--packed`` processes at once, each timing the float32 eager step on its own model (packed
  runs: on CUDA each process is a context of its own, time-sliced, or shared under MPS when
  ``scripts/mps.sh`` started it); they start their timed steps together, and the row's step is the slowest
  process's, of ``batch x packed`` images;

and, in the same command, the **floor**: the same model at batch 1024, bf16 autocast, channels-last (the
throughput a well-fed GPU reaches). Per mode: ms per step, images/s, achieved TFLOP/s (forward + backward
FLOPs per image from the layers' shapes, :func:`fedaug.models.flops.count_flops`, times images/s;
``torch.utils.flop_counter`` counts MobileNetV2's depthwise backward as dense: 3.9 GFLOP an image, not 0.545)
and its fraction of the device's dense peak, the ratio of images/s to the floor's, and the preset's s/round,
s/run and runs/hour from images/s (local training only: the test pass and the engine are not in it). On a CPU
the graph modes call the step unrecorded (the smoke test's check that the code runs); their timings then say
nothing about a GPU.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedaug.api import TrainSettings
from fedaug.engine.batched.padded import PaddedBatches, PaddedStep
from fedaug.models import build_model
from fedaug.models.flops import count_flops
from fedaug.training.loop import as_batchable, cross_entropy_loss


@dataclass(frozen=True)
class Preset:
    """A conv-net preset: the model, its input, the local batch, and the training images of one round."""

    model: str
    input_shape: tuple[int, int, int]
    num_classes: int
    batch: int
    images_per_round: int  # clients per round x mean local size x local epochs (x views)
    rounds: int
    source: str


PRESETS = {
    # flea_table1_cifar10, K = 500: 50 clients x ~100 images x 5 epochs
    "cifar10_mobilenet": Preset(
        "mobilenet_v2_cifar", (3, 32, 32), 10, 32, 25_000, 100, "flea_table1_cifar10"
    ),
    "cifar10_resnet18": Preset(
        "resnet18_cifar", (3, 32, 32), 10, 32, 25_000, 100, "flea_table1_cifar10 shape"
    ),
    # fedaugmix_table3_cifar10: 10 clients x 375 images x 5 epochs x 3 views
    "cifar10_resnet50": Preset(
        "resnet50_cifar", (3, 32, 32), 10, 32, 56_250, 100, "fedaugmix_table3_cifar10"
    ),
    # not a paper's: the smoke test's tiny conv net (tests/smoke/test_gpu_benchmark.py)
    "smoke_bn_cnn": Preset("bn_cnn_mnist", (1, 28, 28), 10, 8, 1_000, 2, "smoke test"),
}
MODES = (
    "eager",
    "channels_last",
    "bf16",
    "bf16_channels_last",
    "graphs",
    "batched",
    "batched_graphs",
    "packed",
)
FLOOR_BATCH = 1024


def _model(preset: Preset, device: torch.device, channels_last: bool) -> nn.Module:
    torch.manual_seed(0)
    model = build_model(preset.model, num_classes=preset.num_classes, input_shape=preset.input_shape)
    model = model.to(device)
    return model.to(memory_format=torch.channels_last) if channels_last else model


def _data(preset: Preset, batch: int, device: torch.device, channels_last: bool) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, *preset.input_shape, generator=gen).to(device)
    y = torch.randint(0, preset.num_classes, (batch,), generator=gen).to(device)
    return (x.contiguous(memory_format=torch.channels_last) if channels_last else x), y


def eager_step(preset: Preset, device: torch.device, batch: int, bf16: bool, cl: bool) -> Callable[[], None]:
    """One local step (forward, CE, backward, Adam) on a fixed batch, as a callable."""
    model, (x, y) = _model(preset, device, cl), _data(preset, batch, device, cl)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step() -> None:
        autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with autocast:
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()

    return step


def graph_step(preset: Preset, device: torch.device, batch: int) -> Callable[[], None]:
    """The step recorded as a CUDA graph (capturable fused Adam) and replayed; on a CPU called unrecorded."""
    model, (x, y) = _model(preset, device, False), _data(preset, batch, device, False)
    cuda = device.type == "cuda"
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=cuda, capturable=cuda)

    def step() -> None:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()

    return record(step, device)


def batched_step(
    preset: Preset, device: torch.device, batch: int, clients: int, graphs: bool
) -> Callable[[], None]:
    """``clients`` clients' steps as one stacked step (:class:`PaddedStep`), optionally recorded."""
    model = _model(preset, device, False)
    x, y = _data(preset, batch, device, False)
    settings, loss = TrainSettings(batch_size=batch), as_batchable(cross_entropy_loss)
    assert loss is not None
    batches = PaddedBatches.of([[(x, y, {})]] * clients)  # one step of every client, on the same batch
    padded = PaddedStep(model, loss, {}, batches, settings)
    padded.load(model, {}, settings)
    padded.fill(batches, 0)
    return record(padded.run, device) if graphs else padded.run


def record(step: Callable[[], None], device: torch.device) -> Callable[[], None]:
    """``step`` recorded as a CUDA graph after warm-up steps on a side stream (PyTorch's recipe), its replay
    returned; on a CPU ``step`` itself."""
    if device.type != "cuda":
        return step
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def flops_per_image(preset: Preset) -> float:
    """Forward + backward FLOPs of one training image (:func:`fedaug.models.flops.count_flops`)."""
    return count_flops(_model(preset, torch.device("cpu"), False), preset.input_shape).train


def timed(step: Callable[[], None], device: torch.device, steps: int) -> float:
    """Seconds per call of ``step`` over ``steps`` calls after a warm-up call."""
    for _ in range(1):
        step()
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return (time.perf_counter() - start) / steps


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_step(
    mode: str, preset: Preset, device: torch.device, batch: int, clients: int
) -> Callable[[], None]:
    """The step of ``mode`` (:data:`MODES`)."""
    if mode == "graphs":
        return graph_step(preset, device, batch)
    if mode.startswith("batched"):
        return batched_step(preset, device, batch, clients, graphs=mode == "batched_graphs")
    return eager_step(preset, device, batch, bf16=mode.startswith("bf16"), cl=mode.endswith("channels_last"))


def packed_seconds(preset: str, device: torch.device, batch: int, steps: int, processes: int) -> float:
    """Seconds per step of ``processes`` processes each stepping its own model at once (``packed``): every
    process warms up, waits for the others, then times ``steps`` float32 eager steps; the slowest one's time.
    On a CPU each process gets an equal share of this process's threads (at least one)."""
    context = multiprocessing.get_context("spawn")  # a fresh process (and CUDA context) each, as packed runs
    barrier, results = context.Barrier(processes), context.Queue()
    threads = max(1, torch.get_num_threads() // processes)
    args = (preset, str(device), batch, steps, threads, barrier, results)
    workers = [context.Process(target=_packed_worker, args=args) for _ in range(processes)]
    for w in workers:
        w.start()
    try:
        seconds = [results.get(timeout=600) for _ in workers]
    finally:
        for w in workers:
            w.join(timeout=60)
    if failed := [s for s in seconds if isinstance(s, str)]:
        raise RuntimeError(f"a packed process failed: {failed[0]}")
    return max(float(s) for s in seconds)


def _packed_worker(
    name: str, device_name: str, batch: int, steps: int, threads: int, barrier: Any, results: Any
) -> None:
    """One packed process: its step timed after the others are ready (puts seconds per step, or the error)."""
    try:
        torch.set_num_threads(threads)
        device = torch.device(device_name)
        step = eager_step(PRESETS[name], device, batch, bf16=False, cl=False)
        step()
        _sync(device)
        barrier.wait(timeout=600)
        results.put(timed(step, device, steps))
    except Exception as exc:  # reported by the parent, which would otherwise wait for a result
        barrier.abort()  # the others stop waiting for this one at once (BrokenBarrierError)
        results.put(f"{type(exc).__name__}: {exc}")


def measure(
    name: str,
    modes: list[str],
    device: torch.device,
    *,
    batch: int | None,
    steps: int,
    clients: int,
    floor_batch: int,
    peak: dict[str, float] | None,
    packed: int = 4,
) -> dict[str, Any]:
    """The rows of every mode of preset ``name`` and its floor, in one process."""
    preset = PRESETS[name]
    batch = batch or preset.batch
    flops = flops_per_image(preset)
    floor_s = timed(eager_step(preset, device, floor_batch, bf16=True, cl=True), device, steps)
    floor_ips = floor_batch / floor_s
    rows = []
    for mode in modes:
        images = batch * (clients if mode.startswith("batched") else packed if mode == "packed" else 1)
        seconds = (
            packed_seconds(name, device, batch, steps, packed)
            if mode == "packed"
            else timed(make_step(mode, preset, device, batch, clients), device, steps)
        )
        ips = images / seconds
        round_s = preset.images_per_round / ips
        tflops = ips * flops / 1e12
        precision = "bf16" if mode.startswith("bf16") else "tf32"  # float32 convs run in TF32 on a GPU
        rows.append(
            {
                "mode": mode,
                "ms_per_step": round(1000 * seconds, 3),
                "images_per_step": images,
                "images_per_s": round(ips, 3),
                "achieved_tflops": round(tflops, 4),
                "fraction_of_peak": round(tflops / peak[precision], 5) if peak else None,
                "ratio_to_floor": round(ips / floor_ips, 4),
                "s_per_round": round(round_s, 2),
                "s_per_run": round(round_s * preset.rounds, 1),
                "runs_per_hour": round(3600 / (round_s * preset.rounds), 3),
            }
        )
    return {
        "preset": name,
        **{k: v for k, v in vars(preset).items()},
        "batch": batch,
        "clients_batched": clients,
        "processes_packed": packed,
        "gflop_per_train_image": round(flops / 1e9, 4),
        "floor": {
            "batch": floor_batch,
            "ms_per_step": round(1000 * floor_s, 3),
            "images_per_s": round(floor_ips, 1),
            "achieved_tflops": round(floor_ips * flops / 1e12, 4),
        },
        "modes": rows,
    }
