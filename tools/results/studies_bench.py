"""The generated blocks of the benchmark-backed study READMEs (``flower``, ``speed``), read from the JSON the
benchmarks committed under ``benchmarks/results/``."""

from __future__ import annotations

import json
import statistics

from tools.results.common import (
    ROOT,
    Archive,
    fragment,
)
from tools.results.fragments import markdown_table

# --- studies/flower: benchmarks/results/flower_vs_engine.json


@fragment("flower-vs-engine")
def flower_vs_engine(archive: Archive) -> str:
    """``benchmarks/flower_vs_engine.py``'s JSON: median round time on each runtime per run, and the means."""
    data = json.loads((ROOT / "benchmarks" / "results" / "flower_vs_engine.json").read_text())
    names = {"fedavg": "FedAvg", "flea": "FLea"}
    rows, seen = [], set()
    for run in data["runs"]:
        first = "engine first" if run["order"][0] == "engine" else "Flower first"
        wall = ""
        if run["repeat"] not in seen:  # one process per repeat runs both methods: its wall time is shared
            seen.add(run["repeat"])
            wall = f"{run['engine_wall_s']:.0f} vs {run['flower_wall_s']:.0f} (both methods)"
        rows.append(
            [
                names[run["method"]],
                f"{run['repeat']} ({first})",
                f"{run['engine_median_s']:.1f}",
                f"{run['flower_median_s']:.1f}",
                f"{run['ratio']:.2f}",
                wall,
                "yes" if run["identical_metrics"] else "no",
            ]
        )
    means = {
        side: ", ".join(
            f"{name} {statistics.fmean(r[f'{side}_median_s'] for r in data['runs'] if r['method'] == m):.1f}"
            for m, name in names.items()
        )
        for side in ("engine", "flower")
    }
    ratio = statistics.fmean(r["ratio"] for r in data["runs"])
    rows.append(["mean", "", means["engine"], means["flower"], f"{ratio:.2f}", "", ""])
    header = ["method", "repeat (order)", "engine s/round", "Flower s/round", "Flower / engine"]
    return markdown_table([*header, "whole run, engine vs Flower (s)", "same metrics"], rows)


# --- studies/speed: benchmarks/results/run_all.json (engine_vs_floor_suite.py) ------------------------------

SUITE_CASES = {
    "default/fedavg-before": "default, FedAvg, before (`engine.channels_last=none`)",
    "default/fedavg": "default, FedAvg, now",
    "default/flea": "default, FLea",
    "small/fedavg": "small, FedAvg (BN CNN)",
    "small/fedavg-batched": "small, FedAvg, batched clients",
    "small/flea": "small, FLea",
    "small-mlp/fedavg": "small-mlp, FedAvg",
    "small-mlp/fedavg-batched": "small-mlp, FedAvg, batched clients",
}


@fragment("speed-suite")
def speed_suite(archive: Archive) -> str:
    """The suite's cases: median round time and its phases, the compute floor and the ratio to it."""
    cases = json.loads((ROOT / "benchmarks" / "results" / "run_all.json").read_text())["cases"]
    rows = []
    for key, name in SUITE_CASES.items():
        case = cases[key]
        engine = case["engine"]
        rest = engine["aggregate"] + engine["share"] + engine["checkpoint"]
        hourly = case["runs_per_hour"]
        rows.append(
            [
                name,
                *(f"{engine[k]:.2f}" for k in ("round_time", "train", "eval")),
                f"{rest:.3f}",
                f"{case['floor']['train_plus_eval']:.2f}",
                f"{case['ratio_round']:.2f}",
                f"{case['memory_mib']['peak_rss']:.0f}",
                f"{hourly:.2f}" if hourly < 10 else f"{hourly:.1f}",
            ]
        )
    header = [
        "case",
        "s/round",
        "train",
        "eval",
        "aggr + share + ckpt",
        "floor (train + eval)",
        "ratio to floor",
    ]
    return markdown_table([*header, "peak RSS MiB", "100-round runs/h"], rows)


@fragment("speed-h200")
def speed_h200(archive: Archive) -> str:
    """``benchmarks/results/gpu_h200.json``: each method sequential, batched and packed on the H200."""
    data = json.loads((ROOT / "benchmarks" / "results" / "gpu_h200.json").read_text())
    modes = {"sequential": "sequential", "batched": "batched clients", "packed": "{workers} packed runs"}
    rows = []
    for method, runs in data["methods"].items():
        official = 100 * data["official_code_h200_round_s"][method]
        for run in runs:
            packed = run["mode"] == "packed"
            rows.append(
                [
                    {"fedavg": "FedAvg", "flea": "FLea"}[method],
                    modes[run["mode"]].format(**run),
                    "–" if packed else f"{run['median_round_s']:.2f}",
                    f"{run['run_s_100']:.0f}" + (" (wall / runs)" if packed else ""),
                    f"{run['runs_per_hour']:.0f}",
                    f"{official / run['run_s_100']:.1f}x",
                    "–" if packed else f"{run['peak_gpu_memory_mib']:.0f}",
                    "–" if packed else f"{run['achieved_tflops']:.2f}",
                ]
            )
    header = ["method", "mode", "median s/round", "s per 100-round run", "runs/hour"]
    header += ["vs the authors' code (H200, one process)", "peak GPU MiB", "model TFLOP/s"]
    return markdown_table(header, rows)


H100_SOURCES = (
    ("gpu_h100_probe_3rounds.json", "median"),
    ("gpu_h100_graphs_15rounds.json", "mean"),
    ("gpu_h100_graph_memory.json", "mean"),
)
"""The H100 measurements of the CUDA-graph table and how each gives a 100-round run: 100 x the median round of
a 3-round probe (its rounds' mean carries the start-up), 100 x the mean round of the longer runs."""
H100_MODES = {
    "sequential": "eager, clients one by one",
    "batched": "batched clients",
    "graphs": "CUDA graphs",
    "graphs_unreleased": "CUDA graphs, dropped recordings kept",
}


@fragment("speed-h100-graphs")
def speed_h100_graphs(archive: Archive) -> str:
    """The H100 runs per method and mode: median round, a 100-round run, the speed-up over the authors' code
    on an H200 and the memory (the shared-mempool try, rejected, is in the JSON only)."""
    rows: dict[str, list[list[str]]] = {"fedavg": [], "flea": []}
    for name, statistic in H100_SOURCES:
        data = json.loads((ROOT / "benchmarks" / "results" / name).read_text())
        for method, runs in data["methods"].items():
            official = 100 * data["official_code_h200_round_s"][method]
            for run in sorted(
                runs, key=lambda r: list(H100_MODES).index(r["mode"]) if r["mode"] in H100_MODES else 9
            ):
                if run["mode"] not in H100_MODES:
                    continue
                seconds = 100 * run["median_round_s"] if statistic == "median" else run["run_s_100"]
                reserved = run.get("peak_gpu_reserved_mib")
                memory = f"{run['peak_gpu_memory_mib']:.0f} / " + (
                    "–" if reserved is None else f"{reserved:,.0f}"
                )
                rows[method].append(
                    [
                        {"fedavg": "FedAvg", "flea": "FLea"}[method],
                        H100_MODES[run["mode"]],
                        str(run["rounds"]),
                        f"{run['median_round_s']:.3f}",
                        f"{seconds:.{0 if statistic == 'median' else 1}f} (100 x {statistic})",
                        f"{official / seconds:.{0 if official / seconds >= 20 else 1}f}x",
                        memory,
                        f"{run['achieved_tflops']:.2f}",
                    ]
                )
    header = ["method", "mode", "rounds", "median s/round", "100-round run, s"]
    header += [
        "vs the authors' code (8 s / 1.3 s a round, H200)",
        "peak allocated / reserved MiB",
        "model TFLOP/s",
    ]
    return markdown_table(header, [*rows["fedavg"], *rows["flea"]])
