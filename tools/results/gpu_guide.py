"""The generated sentences and tables of docs/guide/gpu.md (issue #64), each read from the JSON a benchmark
committed under ``benchmarks/results/`` (the file named beside it)."""

from __future__ import annotations

import json
import statistics

from tools.results.common import ROOT, Archive, fragment, list_item
from tools.results.fragments import markdown_table

BENCH = ROOT / "benchmarks" / "results"
ITEM = "  "
"""The indent of a list item's text; a nested item's is twice that."""
NESTED = ITEM * 2


def _bench(name: str) -> dict:
    return json.loads((BENCH / name).read_text())


def _by_mode(data: dict) -> dict[str, dict[str, dict]]:
    return {method: {r["mode"]: r for r in runs} for method, runs in data["methods"].items()}


@fragment("gpu-batched-h100-3rounds")
def gpu_batched_h100_3rounds(archive: Archive) -> str:
    """vmap-batched clients against one by one and CUDA graphs, median s a round on the H100."""
    data = _bench("gpu_h100_probe_3rounds.json")
    modes = _by_mode(data)
    s = {mode: {m: modes[m][mode]["median_round_s"] for m in modes} for mode in ("batched", "sequential")}
    graphs = {m: modes[m]["graphs"]["median_round_s"] for m in modes}
    faster = all(s["batched"][m] < s["sequential"][m] for m in modes)
    still = all(graphs[m] < s["batched"][m] for m in modes)
    return list_item(
        f"On an H100 ({data['rounds']} rounds, `gpu_h100_probe_3rounds.json`) it is "
        f"{'faster' if faster else 'not faster'} than one by one (FedAvg {s['batched']['fedavg']:.2f} "
        f"against {s['sequential']['fedavg']:.2f} s a round, FLea {s['batched']['flea']:.2f} against "
        f"{s['sequential']['flea']:.2f}), "
        + ("but CUDA graphs (below) are faster still" if still else "and CUDA graphs (below) are not faster")
        + f" ({graphs['fedavg']:.2f} and {graphs['flea']:.2f} s in the same call) "
        "([speed study](../../studies/speed/README.md)).\n"
    )


@fragment("gpu-step-ops")
def gpu_step_ops(archive: Archive) -> str:
    """ATen operations per step, eager and outside the recorded step (``step_ops_cpu.json``)."""
    rows = _bench("step_ops_cpu.json")["rows"]
    ops = {(r["method"], r["cuda_graphs"]): r["ops_per_step"]["loop"] for r in rows}
    return list_item(
        f"An eager FedAvg step issues {ops['fedavg', False]:.0f} operations plus the optimizer's (about "
        "a dozen launches of CUDA's foreach Adam), a FLea step "
        f"{ops['flea', False]:.0f} plus the optimizer's. With graphs, {ops['fedavg', True]:.1f} (FedAvg) "
        f"and {ops['flea', True]:.1f} (FLea) operations stay outside the recorded step (batch gather, "
        "copies into its inputs, the kept loss, the logged sums), plus one replay.\n"
    )


@fragment("gpu-recording-cost")
def gpu_recording_cost(archive: Archive) -> str:
    """FLea's recordings and their host time on the H100: 15 rounds recording every round
    (``gpu_h100_graphs_15rounds.json``), 5 rounds recording in rounds 1 and 2 only, with and without the
    release of dropped recordings (``gpu_h100_graphs_release_5rounds.json``)."""
    old = _by_mode(_bench("gpu_h100_graphs_15rounds.json"))["flea"]["graphs"]
    flea = _by_mode(_bench("gpu_h100_graphs_release_5rounds.json"))["flea"]
    now, kept = flea["graphs"], flea["graphs_unreleased"]
    then, graphs = old["step_graphs"], now["step_graphs"]
    return list_item(
        f"On the H100 recording took {then['record_s']:.1f} s of host time in FLea's first "
        f"{old['rounds']} rounds ({then['captured']} recordings), about "
        f"{then['record_s'] / old['rounds']:.1f} s of its {old['median_round_s']:.2f} s rounds (median), "
        "when FLea recorded every round (`gpu_h100_graphs_15rounds.json`); it now records in rounds 1 and "
        f"2 only (above): {graphs['captured']} recordings and {graphs['record_s']:.1f} s in "
        f"{now['rounds']} rounds (`gpu_h100_graphs_release_5rounds.json`). Releasing dropped recordings: "
        f"FLea's {now['rounds']}-round median round was {now['median_round_s']:.2f} s with the release and "
        f"{kept['median_round_s']:.2f} s without (one process, after the grid below), and its peak "
        f"reserved memory {now['peak_gpu_reserved_mib'] / 1024:.1f} GiB.\n"
    )


def _paired(before: dict, after: dict) -> list[float]:
    return [b - a for b, a in zip(before["samples_s"], after["samples_s"], strict=True)]


@fragment("gpu-cold-start-cpu")
def gpu_cold_start_cpu(archive: Archive) -> str:
    """The cold start before and after its cuts, fresh processes in pairs (``cold_start_cpu.json``)."""
    cases = _bench("cold_start_cpu.json")["cases"]
    before, after = cases["default_fedavg_flea"]["before"], cases["default_fedavg_flea"]["after"]
    walls = _paired(before["wall_s"], after["wall_s"])
    outside = _paired(before["outside_rounds_s"], after["outside_rounds_s"])
    smoke = cases["smoke"]
    phases = after["startup_phase_median_s"]
    return list_item(
        "The default preset's comparison with one client and one epoch per round took a median "
        f"{before['wall_s']['median_s']:.1f} s before and {after['wall_s']['median_s']:.1f} s after "
        f"(faster in {sum(d > 0 for d in walls)} of {len(walls)} pairs, by {statistics.mean(walls):.1f} "
        f"± {statistics.stdev(walls):.1f} s, mean ± sample std of the paired differences), of which the "
        f"time outside the rounds fell by {min(outside):.1f}-{max(outside):.1f} s a pair; a one-method "
        f"run (`smoke`): {smoke['before']['wall_s']['median_s']:.1f} vs "
        f"{smoke['after']['wall_s']['median_s']:.1f} s (medians). Medians of the comparison's phases "
        f"after: `imports` {phases['imports']:.1f} s, `torch_dynamo` {phases['torch_dynamo']:.1f} s.\n",
        "",
    )


@fragment("gpu-padded-3round-gap")
def gpu_padded_3round_gap(archive: Archive) -> str:
    """FedAvg's global state after 3 rounds, vmap and padded against the sequential loop
    (``padded_clients_fedavg_3rounds_2026-11-28.json``)."""
    data = _bench("padded_clients_fedavg_3rounds_2026-11-28.json")
    runs = data["methods"]["fedavg"]
    vmap, padded = runs["true"], runs["padded"]
    top = {name: run["largest_diffs_vs_false"][0] for name, run in (("vmap", vmap), ("padded", padded))}
    names = (("false", "sequential"), ("true", "vmap"), ("padded", "padded"))
    accuracy = ", ".join(f"{100 * runs[mode]['final_test_acc']:.1f} % {name}" for mode, name in names)
    return list_item(
        f"After {data['rounds']} rounds of FedAvg the global state of the vmap and padded runs differs "
        f"from the sequential run's by {vmap['max_abs_weight_diff_vs_false']:.2f} and "
        f"{padded['max_abs_weight_diff_vs_false']:.2f} (largest absolute difference, in "
        f"`{top['padded']['name']}`: {100 * top['vmap']['relative']:.0f} % and "
        f"{100 * top['padded']['relative']:.0f} % of its largest value), at a final test accuracy of "
        f"{accuracy}.\n",
        NESTED,
    )


DRIFT = {
    "1 step, lr 1e-3": ("batched_drift_harnet_1step.json", 1),
    "1 round (20 steps), lr 1e-3": ("batched_drift_harnet_lr1e-3.json", 5),
    "1 round, lr 1e-4": ("batched_drift_harnet_lr1e-4.json", 5),
}
"""The drift table's columns: the file and the run's local epochs."""


def _small(value: float) -> str:
    """``1.09``, ``0.12``; below 0.1 as ``1.8e-3``."""
    if value >= 0.1:
        return f"{value:.2f}"
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _largest(per_key: dict[str, dict[str, list[float]]], name: str) -> float:
    """The row maximum of ``batched_drift.py``: conv biases before a BatchNorm left out."""
    return max(
        diffs[name][0]
        for key, diffs in per_key.items()
        if not (key.startswith("blocks.") and key.endswith(".0.bias"))
    )


@fragment("gpu-padded-drift")
def gpu_padded_drift(archive: Archive) -> str:
    """Entry by entry on round 1's first two clients (``batched_drift_harnet_*.json``)."""
    runs = [next(r for r in _bench(name)["runs"] if r["local_epochs"] == e) for name, e in DRIFT.values()]
    rows = {
        "sequential float32 vs float64 (float32's own error)": "float32_own_error",
        "padded vs sequential, float32": "padded",
        "vmap vs sequential, float32": "vmap",
    }
    body = [[label, *(_small(_largest(r["per_key"], key)) for r in runs)] for label, key in rows.items()]
    float64 = "sequential_float64 vs padded_float64"
    body.append(["padded vs sequential, float64", *(_small(r["max_abs_param_diff"][float64]) for r in runs)])
    return list_item(markdown_table(["largest abs. difference", *DRIFT], body), NESTED)


@fragment("gpu-padded-before-adam-fix")
def gpu_padded_before_adam_fix(archive: Archive) -> str:
    """The padded 3-round gap before the Adam fix (the 1-thread file) and after (the 2026-11-28 file)."""
    before = _bench("padded_clients_intel_xeon_avx512_1thread.json")["methods"]["fedavg"]["padded"]
    after = _bench("padded_clients_fedavg_3rounds_2026-11-28.json")["methods"]["fedavg"]["padded"]
    return list_item(
        f"The 3-round gap was {before['max_abs_weight_diff_vs_false']:.2f} before "
        "(`padded_clients_intel_xeon_avx512_1thread.json`) and is "
        f"{after['max_abs_weight_diff_vs_false']:.2f} after.\n",
        NESTED,
    )


@fragment("gpu-padded-cpu-time")
def gpu_padded_cpu_time(archive: Archive) -> str:
    """Seconds a round per mode on a CPU, and the test accuracy after the rounds
    (``padded_clients_intel_xeon_avx512_1thread.json``)."""
    data = _bench("padded_clients_intel_xeon_avx512_1thread.json")
    parts, accuracy = [], []
    for method, name in (("fedavg", "FedAvg"), ("flea", "FLea")):
        runs = data["methods"][method]
        base, vmap, padded = (runs[m]["s_per_round"] for m in ("false", "true", "padded"))
        parts.append(
            f"{name} {base:.1f} s a round sequential, {vmap:.1f} vmap-batched ({vmap / base:.2f}x), "
            f"{padded:.1f} padded ({padded / base:.2f}x)"
        )
        cells = ", ".join(f"{100 * runs[m]['final_test_acc']:.1f}" for m in ("false", "true", "padded"))
        accuracy.append(f"{name} {cells} %")
    return list_item(
        f"Load average {data['loadavg'][0]:.1f}; "
        + "; ".join(parts)
        + f". Test accuracy after {data['rounds']} rounds (sequential, vmap, padded): "
        + "; ".join(accuracy)
        + ".\n",
        NESTED,
    )
