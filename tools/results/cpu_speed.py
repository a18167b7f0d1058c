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


FLEA_ROUND_PHASES = (
    ("local_training", "local training"),
    ("loss_forward", "- the loss's forward, of which:"),
    ("loss.encoder", "- - encoder (blocks up to the split)"),
    ("loss.local_head_passes", "- - local head passes (f~, and f for the extra CE)"),
    ("loss.global_head_L_dis", "- - frozen global head on f~, L_dis"),
    ("loss.dcor_L_dec", "- - dCor of inputs and activations, L_dec"),
    (
        "loss.mixing_soft_labels_rest",
        "- - the rest (FLea: mixing, soft labels, CEs; FedAvg: its whole forward, CE)",
    ),
    ("backward", "- backward"),
    ("optimizer_step", "- optimizer step and zero_grad"),
    ("loop_own_work", "- the loop's own work (batches, sums)"),
    ("client_setup", "client set-up (weights, loss, teacher, buffer)"),
    ("share_phase", "share phase (features of 10% of each client's data)"),
    ("aggregation", "aggregation"),
    ("evaluation", "evaluation (10,000 test images)"),
)
"""The rows of the FLea round table: ``flea_round_cpu.json``'s profiled phases, and their labels."""


@fragment("flea-round-cpu")
def flea_round_cpu(archive: Archive) -> str:
    """FLea's and FedAvg's round on the CIFAR-10 stand-in setting: profiled phases, then round times before
    and after the change of ``before_commit``, and the ratios."""
    del archive
    data = _bench("flea_round_cpu.json")
    methods = ("flea", "fedavg")
    profiled = {m: data[m]["profiled_phases_s"] for m in methods}
    rows = []
    for key, label in FLEA_ROUND_PHASES:
        cells = [label]
        for m in methods:
            value = profiled[m].get(key, 0.0)
            cells += [f"{value:.2f}", f"{100 * value / profiled[m]['round']:.0f}%"]
        rows.append(cells)
    rows.append(["whole round", *(c for m in methods for c in (f"{profiled[m]['round']:.2f}", "100%"))])
    header = ["phase (the last round, under cProfile)", "FLea s", "share", "FedAvg s", "share"]
    phases = markdown_table(header, rows)
    times = []
    for m in methods:
        for tree in ("before", "after"):
            median = data[m][tree]["median_s"]
            times.append(
                [
                    m,
                    tree,
                    f"{median['train']:.1f}",
                    f"{median['eval']:.2f}",
                    f"{median['round_time']:.1f}",
                    f"{median['cpu_s']:.1f}",
                ]
            )
    header = ["method", "code", "local training s", "evaluation s", "round s", "round CPU s"]
    rounds = markdown_table(header, times)
    ratios = data["ratios"]

    def ratio(name: str) -> str:
        entry = ratios[name]
        spread = ", ".join(f"{v:.3f}" for v in entry["per_repeat"])
        return f"{entry['median']:.3f} ({spread})"

    lines = [
        f"- FLea over FedAvg, round CPU time: {ratio('flea_over_fedavg.before.cpu_s')} before, "
        f"{ratio('flea_over_fedavg.after.cpu_s')} after; wall clock: "
        f"{ratio('flea_over_fedavg.before.round_time')} before, {ratio('flea_over_fedavg.after.round_time')} "
        "after.",
        f"- After over before, round CPU time: FLea {ratio('flea.after_over_before.cpu_s')}, FedAvg "
        f"{ratio('fedavg.after_over_before.cpu_s')}; wall clock: FLea "
        f"{ratio('flea.after_over_before.round_time')}, FedAvg "
        f"{ratio('fedavg.after_over_before.round_time')}.",
        f"- Metrics bit-identical before and after: FLea {data['flea']['metrics_identical']}, FedAvg "
        f"{data['fedavg']['metrics_identical']}. Load average at the end: {_load(data)} (two cores).",
    ]
    near = _bench("flea_round_cpu_inprocess.json")
    ratios_near, median = near["ratios"], near["median_ratios"]

    def spread(name: str) -> str:
        return f"{median[name]:.3f} (" + ", ".join(f"{v:.3f}" for v in ratios_near[name]) + ")"

    lines += [
        f"- In one process, round 2's first {near['clients']} client updates, this code against the code"
        f" before emulated, alternating, {near['repeats']} repeats (thread CPU time): after over before FLea "
        f"{spread('flea.after_over_before')}, FedAvg {spread('fedavg.after_over_before')}; FLea over FedAvg "
        f"{spread('flea_over_fedavg.after')}. Updates bit-identical: FLea "
        f"{near['updates_identical']['flea']}, FedAvg {near['updates_identical']['fedavg']} "
        "(`flea_round_cpu_inprocess.json`).",
    ]
    source = (
        "(`benchmarks/results/flea_round_cpu.json`: medians of rounds 2-3 of each process; ratios: the median"
        " of the repeats', each repeat's in brackets)"
    )
    return phases + "\n" + rounds + "\n" + "\n".join(lines) + "\n\n" + source + "\n"
