"""The generated tables of issue #65's CPU defaults and FLOP counts (docs/guide/cpu-campaign.md,
docs/guide/gpu.md), read from the JSON ``benchmarks/step_variants.py`` and ``benchmarks/flops.py`` committed
under ``benchmarks/results/`` (the file named beside each table)."""

from __future__ import annotations

import json
from typing import Any

from tools.results.common import ROOT, Archive, fragment
from tools.results.fragments import markdown_table

BENCH = ROOT / "benchmarks" / "results"
EVAL_MODELS = ("bn_cnn_cifar", "lenet5", "audionet")
"""The models of ``eval_batch_<model>_cpu.json``, in the table's order."""


def _bench(name: str) -> Any:
    return json.loads((BENCH / name).read_text())


def _load(data: dict[str, Any]) -> str:
    return f"{data['loadavg'][0]:.1f}"


@fragment("flops-per-image")
def flops_per_image(archive: Archive) -> str:
    """GFLOP of one training image per model, counted from the shapes and by FlopCounterMode."""
    del archive
    models = _bench("flops_per_image.json")["models"]
    rows = [
        [
            f"`{name}`",
            f"{row['gflop_forward']:.4g}",
            f"{row['gflop_train']:.4g}",
            f"{row['gflop_train_flop_counter_mode']:.4g}",
        ]
        for name, row in models.items()
    ]
    header = ["model", "forward (GFLOP)", "forward + backward", "FlopCounterMode's forward + backward"]
    return markdown_table(header, rows) + "\n(`benchmarks/results/flops_per_image.json`)\n"


@fragment("cpu-channels-last")
def cpu_channels_last(archive: Archive) -> str:
    """Channels-last against contiguous: a training step per batch size, and evaluation, per model."""
    del archive
    rows = []
    for batch in (32, 10):
        data = _bench(f"channels_last_cifar_cpu_batch{batch}.json")
        for name, row in data["models"].items():
            step = row["step_ms"]
            rows.append(
                [
                    f"`{name}`",
                    str(batch),
                    f"{step['contiguous']:.1f}",
                    f"{step['channels_last']:.1f}",
                    f"{row['speedup_step']:.2f}x",
                    f"{row['speedup_eval']:.2f}x",
                    _load(data),
                ]
            )
    audio = _bench("channels_last_audionet_cpu.json")
    row = audio["models"]["audionet"]
    step = row["step_ms"]
    rows.append(
        [
            "`audionet`",
            str(row["train_batch"]),
            f"{step['contiguous']:.1f}",
            f"{step['channels_last']:.1f}",
            f"{row['speedup_step']:.2f}x",
            f"{row['speedup_eval']:.2f}x",
            _load(audio),
        ]
    )
    header = ["model", "batch", "step ms, contiguous", "channels-last", "step", "evaluation", "load"]
    files = "`channels_last_cifar_cpu_batch32.json`, `_batch10.json`, `channels_last_audionet_cpu.json`"
    return markdown_table(header, rows) + f"\n(`benchmarks/results/`: {files})\n"


@fragment("cpu-eval-batch")
def cpu_eval_batch(archive: Archive) -> str:
    """Seconds to evaluate the test set per batch size, channels-last and contiguous, per model."""
    del archive
    rows = []
    for name in EVAL_MODELS:
        data = _bench(f"eval_batch_{name}_cpu.json")
        times = data["eval_s"]
        batches = sorted({int(key.split("/")[1]) for key in times})
        for fmt in ("channels_last", "contiguous"):
            cells = [f"{times[f'{fmt}/{b}']:.3f}" for b in batches]
            best = min(batches, key=lambda b: times[f"{fmt}/{b}"])
            rows.append(
                [
                    f"`{name}`",
                    str(data["test_size"]),
                    fmt.replace("_", "-"),
                    ", ".join(f"{b}: {c}" for b, c in zip(batches, cells, strict=True)),
                    str(best),
                    f"{times[f'{fmt}/1024'] / times[f'{fmt}/{best}']:.2f}x",
                    _load(data),
                ]
            )
    header = ["model", "images", "format", "s per pass, by batch", "fastest", "vs 1024", "load"]
    return markdown_table(header, rows) + "\n(`benchmarks/results/eval_batch_<model>_cpu.json`)\n"
