"""The generated sentences of studies/speed/README.md (issue #64), each read from the JSON a benchmark
committed under ``benchmarks/results/`` or the study kept beside its README (the file named beside it)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from functools import cache
from types import ModuleType
from typing import Any

from tools.results.common import ROOT, STUDIES, Archive, fragment, list_item
from tools.results.fragments import markdown_table

BENCH = ROOT / "benchmarks" / "results"
ITEM = "  "
"""The indent of a list item's text."""


@cache
def _load(name: str) -> Any:
    return json.loads((BENCH / name).read_text())


def j(name: str, *path: str | int) -> Any:
    """The value at ``path`` (keys and list indices) of ``benchmarks/results/<name>``."""
    value = _load(name)
    for key in path:
        value = value[key]
    return value


def _pct(fraction: float) -> str:
    return f"{100 * fraction:.0f}%"


# --- the suite's bullets: run_all.json, run_all_small_6rounds.json, engine_vs_floor_fedavg_1thread.json ----


def _case(name: str) -> dict:
    return j("run_all.json", "cases", name)


@fragment("speed-default-floor")
def speed_default_floor(archive: Archive) -> str:
    earlier = j("engine_vs_floor_fedavg_1thread.json")
    engine, floor = earlier["engine"], earlier["floor"]
    return list_item(
        f"(ratio {_case('default/fedavg')['ratio_round']:.2f} now; {engine['train'] / floor['train']:.2f} "
        "for "
        f"local training and {engine['round_time'] / (floor['train'] + floor['eval']):.2f} for the whole "
        f"round in an earlier {earlier['rounds']}-round measurement, "
        "`engine_vs_floor_fedavg_1thread.json`).\n"
    )


@fragment("speed-flea-extra")
def speed_flea_extra(archive: Archive) -> str:
    flea = [_case(name) for name in ("default/flea", "small/flea")]
    extra = sorted(c["overhead_fraction_of_floor"] for c in flea)
    share = sorted(1000 * c["engine"]["share"] for c in flea)
    return list_item(
        f"FLea's extra {_pct(extra[0])}-{_pct(extra[1])} over the plain-CE floor (default and small "
        f"presets), its share phase {share[0]:.0f}-{share[1]:.0f} ms per round (`run_all.json`).\n"
    )


@fragment("speed-small-floor")
def speed_small_floor(archive: Archive) -> str:
    six = j("run_all_small_6rounds.json", "cases")
    return list_item(
        f"Over {j('run_all_small_6rounds.json', 'rounds')} rounds (`run_all_small_6rounds.json`) the BN CNN "
        f"ran at {six['small/fedavg']['ratio_round']:.2f} and the MLP at "
        f"{six['small-mlp/fedavg']['ratio_round']:.2f} of the floor; over {j('run_all.json', 'rounds')} "
        "rounds "
        f"(the table) at {_case('small/fedavg')['ratio_round']:.2f} and "
        f"{_case('small-mlp/fedavg')['ratio_round']:.2f}.\n"
    )


# --- "Each speed-up, measured on its own": one JSON (or a few) per row -------------------------------------


def _e(value: float) -> str:
    """``4e-3``."""
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _x(value: float) -> str:
    return f"{value:.2f}x"


def _faster(then: dict, now: dict) -> str:
    """How many times faster the sequential loop's client step became."""
    return f"{then['ms_per_client_step']['sequential'] / now['ms_per_client_step']['sequential']:.1f}"


def _models(name: str) -> dict:
    return j(name, "models")


@fragment("speed-each")
def speed_each(archive: Archive) -> str:
    ev = j("eval_batch.json", "eval_s")
    cl = _models("channels_last.json")
    fast, slow = j("precision_step_harnet.json"), j("precision_step_harnet_avx2.json")
    b512, b2 = _models("batched_clients.json"), _models("batched_clients_avx2.json")
    zda = _models("batched_clients_fedzda_loaded.json")["bn_cnn_mnist"]
    late = _models("batched_clients_mlp_avx2_2026-11-27.json")["mlp"]
    zs = _models("zsdg_step.json")
    modes = j("parallel_runs.json", "modes")
    two, one = (m["runs_per_hour_100_rounds"] for m in modes.values())
    channels = sorted(v for k, v in ev.items() if k.startswith("channels_last/"))
    rows = [
        [
            "evaluation without autograd, batch 1024",
            "`step_variants.py --compare eval_batch` (was `eval_batch.py`) / `eval_batch.json`",
            "batch size itself changes little (contiguous: "
            + ", ".join(f"{ev[f'contiguous/{b}']:.1f} s at {b}" for b in (256, 1024, 2947))
            + f"; channels-last {channels[0]:.1f}-{channels[-1]:.1f} s)",
        ],
        [
            "channels-last memory format",
            "`step_variants.py --compare memory_format` (was `channels_last.py`) / `channels_last.json`",
            f"HARNet: eval {_x(cl['harnet']['speedup_eval'])}, training step "
            f"{_x(cl['harnet']['speedup_step'])}; "
            f"BN CNN: eval {_x(cl['bn_cnn_mnist']['speedup_eval'])}, step "
            f"{_x(cl['bn_cnn_mnist']['speedup_step'])}. Default `auto`: evaluation model only (results "
            "identical "
            "up to float rounding; training in channels-last is `engine.channels_last: all`)",
        ],
        [
            "bfloat16 autocast (`engine.precision: bf16`)",
            "`step_variants.py --compare precision` (was `precision_step.py`) / `precision_step_harnet.json`",
            f"on the AVX-512 BF16 CPU: HARNet step {_x(fast['speedup_step'])}, evaluation "
            f"{_x(fast['speedup_eval'])}. On the AVX2-only CPU bf16 is emulated: **"
            f"{1 / slow['speedup_step']:.0f}x slower per step, {1 / slow['speedup_eval']:.0f}x slower to "
            "evaluate** (`precision_step.py --test-size 512 --repeats 3 --steps 3` -> "
            f"`precision_step_harnet_avx2.json`: step {slow['step_ms']['float32']:.0f} ms vs "
            f"{slow['step_ms']['bf16']:.0f} ms), and the 3-round bf16 case of run_all did not finish within "
            "its "
            f"timeout (float32: {_case('default/fedavg')['case_wall_s']:.0f} s, `run_all.json`); fedaug now "
            "warns when bf16 is asked for on such a CPU and run_all skips it there",
        ],
        [
            "batched clients (`engine.batched_clients: true`)",
            "`batched_clients.py` / `batched_clients.json` (AVX-512 CPU), `batched_clients_avx2.json` (AMD "
            "EPYC)",
            f"AVX-512 CPU (loaded machine): MLP {_x(b512['mlp']['speedup'])}, BN CNN "
            f"{_x(b512['bn_cnn_mnist']['speedup'])}. AMD EPYC (AVX2), idle, 5 repeats: MLP "
            f"**{_x(b2['mlp']['speedup'])}**, BN CNN **{_x(b2['bn_cnn_mnist']['speedup'])}** "
            f"({b2['mlp']['clients']} clients, interleaved repeats); BN CNN in the Fed-ZDA setting (SGD, "
            "batch "
            f"10, {zda['client_steps']} client steps; `batched_clients.py configs/fedzda_fmnist.yaml "
            "--models "
            "bn_cnn_mnist --repeats 2`, two training runs on the same 2 cores): "
            f"{_x(zda['speedup'])} (`batched_clients_fedzda_loaded.json`). Remeasured 2026-11-27 (AMD EPYC): "
            f"MLP **{_x(late['speedup'])}**, the sequential loop having become "
            f"{_faster(b2['mlp'], late)}x faster "
            "(`batched_clients_mlp_avx2_2026-11-27.json`; below)",
        ],
        [
            "ZSDG step (Fed-ZDAC/ZDAS's generation)",
            "`zsdg_step.py` / `zsdg_step.json`",
            "the BN hooks' variance in two passes instead of `Tensor.var` (its slowest op) and generation "
            "on a "
            "channels-last copy of the model: a step "
            f"{_x(zs['bn_cnn_mnist']['speedup_vs_var']['two_pass_channels_last'])} faster for the BN CNN "
            f"(batch {zs['bn_cnn_mnist']['batch']}: {zs['bn_cnn_mnist']['ms_per_step']['var']:.0f} -> "
            f"{zs['bn_cnn_mnist']['ms_per_step']['two_pass_channels_last']:.0f} ms) and "
            f"{_x(zs['harnet']['speedup_vs_var']['two_pass_channels_last'])} for HARNet; the generated "
            "inputs "
            "equal the old code's to float rounding (after 20 steps: "
            f"{_e(zs['bn_cnn_mnist']['max_abs_diff_vs_var']['two_pass_channels_last'])} max abs difference, "
            "the "
            "optimisation amplifying rounding). Always on (2026-11-24); the Fashion-MNIST seed-0 Fed-ZDA "
            "runs "
            "in `studies/fedzda/` predate it",
        ],
        [
            "parallel runs in a sweep",
            "`workers_vs_threads.py` / `parallel_runs.json`",
            f"2 runs x 1 thread: {_x(two / one)} the runs per hour of 1 run x 2 threads (idle machine)",
        ],
        ["K = 10,000 clients", "`idle_clients_scaling.py` / `scaling.json`", "see below"],
    ]
    return markdown_table(["speed-up", "script / JSON", "result"], rows)


# --- the batched clients' remeasurement, parallel runs and K scaling ---------------------------------------


@fragment("speed-batched-why")
def speed_batched_why(archive: Archive) -> str:
    then = _models("batched_clients_avx2.json")["mlp"]["ms_per_client_step"]
    now = _models("batched_clients_mlp_avx2_2026-11-27.json")["mlp"]["ms_per_client_step"]
    return list_item(
        f"The sequential loop is {then['sequential'] / now['sequential']:.1f}x faster than on 2026-11-23 "
        f"({now['sequential']:.2f} against {then['sequential']:.2f} ms a client step, "
        f"`batched_clients_avx2.json`); the batched path {now['batched']:.2f} against "
        f"{then['batched']:.2f} ms.\n"
    )


def _runs_per_hour(name: str) -> tuple[dict, dict]:
    two, one = j(name, "modes").values()
    return two, one


@fragment("speed-parallel-runs")
def speed_parallel_runs(archive: Archive) -> str:
    two, one = _runs_per_hour("parallel_runs.json")
    two_loaded, one_loaded = _runs_per_hour("parallel_runs_loaded_2026-11-22.json")
    loaded = two_loaded["runs_per_hour_100_rounds"] / one_loaded["runs_per_hour_100_rounds"]
    return (
        f"Two runs with one thread each (`--workers 2`) finished in {two['wall_s'][0]:.0f} s, one run at a "
        f"time with two threads in {one['wall_s'][0]:.0f} s: **{two['runs_per_hour_100_rounds']:.2f} against "
        f"{one['runs_per_hour_100_rounds']:.2f} 100-round runs per hour "
        f"({two['runs_per_hour_100_rounds'] / one['runs_per_hour_100_rounds']:.2f}x)** "
        f"(`parallel_runs.json`). The 2026-11-22 measurement on a loaded machine gave {loaded:.1f}x "
        "(`parallel_runs_loaded_2026-11-22.json`).\n"
    )


@fragment("speed-scaling")
def speed_scaling(archive: Archive) -> str:
    cases = {(c["method"], c["num_clients"]): c for c in j("scaling.json", "cases")}
    k = sorted({n for _, n in cases})
    lo, hi = k[0], k[-1]

    def pair(method: str, read: str, unit: str, digits: int) -> str:
        a, b = (cases[method, n] for n in (lo, hi))
        first, last = (c["round"]["round_time"] if read == "round" else c[read] for c in (a, b))
        return f"{first:.{digits}f} -> {last:.{digits}f}{unit}"

    return (
        f"From K = {lo:,} to K = {hi:,} (`scaling.json`): round time FedAvg "
        f"{pair('fedavg', 'round', ' s', 2)}, "
        f"FLea {pair('flea', 'round', ' s', 2)}; checkpoint FedAvg "
        f"{pair('fedavg', 'checkpoint_mib', ' MiB', 2)}, FLea {pair('flea', 'checkpoint_mib', ' MiB', 2)}; "
        f"peak RSS (FedAvg) {pair('fedavg', 'peak_rss_mib', ' MiB', 0)}; dataset tensors "
        f"{pair('fedavg', 'dataset_tensors_mib', ' MiB', 1)}.\n"
    )


# --- the CPU rows' details of the GPU-technique table ------------------------------------------------------


@fragment("speed-head-passes-floor")
def speed_head_passes_floor(archive: Archive) -> str:
    name = "engine_vs_floor_issue52_cpu_2026-11-28.json"
    before, after = (j(name, "flea_side_by_side", side) for side in ("before", "after"))
    fedavg = j(name, "fedavg_after")
    return list_item(
        f"Local training **{_x(before['ratio_train'])} before, {_x(after['ratio_train'])} after** the bare "
        "CE "
        f"loop, the round {_x(before['ratio_round'])} and {_x(after['ratio_round'])}; FedAvg after: "
        f"**{fedavg['ratio_train']:.3f}x** (round {fedavg['ratio_round']:.3f}x) the floor "
        f"(`benchmarks/results/{name}`); FLea's round in the suite above (2026-11-23): "
        f"{_x(_case('default/flea')['ratio_round'])}.\n"
    )


@fragment("speed-many-run-load")
def speed_many_run_load(archive: Archive) -> str:
    rows = j("many_run_eval_cpu_intel_xeon_avx512_harnet.json", "cases", 0, "rows")
    times = next(r for r in rows if r["runs"] == 16)["times_s"]["separate"]
    return list_item(
        f"HARNet's R = 16 separate pass took {min(times):.1f} to {max(times):.0f} s across its "
        f"{len(times)} repeats (`many_run_eval_cpu_intel_xeon_avx512_harnet.json`).\n"
    )


# --- the H100 section (issue #32): its targets, the grid's packing, the release of recordings ---------------

TARGETS_32 = {"fedavg_wall_s": 15, "flea_wall_s": 60, "fedavg_vs_official": 8, "flea_vs_official": 13}
"""Issue #32's targets: a 100-round run's wall time on the GPU, and its speed-up over the authors' code."""
GRID_TARGET_S = 600
"""Issue #32's target for the 36-run grid."""


def _grid_timeline() -> ModuleType:
    spec = importlib.util.spec_from_file_location("grid_timeline", STUDIES / "speed" / "grid_timeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


GRID_LOG = STUDIES / "flea_table1_har" / "h100_one_call" / "sweep.log"


@fragment("speed-h100-targets")
def speed_h100_targets(archive: Archive) -> str:
    """A 100-round run with graphs against issue #32's targets (``device_runs_h100_graphs.json``) and the
    36-run grid's sweep time (its ``sweep.log``)."""
    data = j("device_runs_h100_graphs.json")
    runs = {r["method"]: r for r in data["runs"]}
    official = {m: 100 * data["official_code_h200"][m]["round_s"] for m in runs}
    rounds = {m: runs[m]["mean_round_s"] * runs[m]["rounds"] for m in runs}
    wall = {m: runs[m]["wall_s"] for m in runs}
    exits = [int(s) for s in re.findall(r"sweep exit \d+ after (\d+) s", GRID_LOG.read_text())]
    t = TARGETS_32
    rows = [
        [
            "CUDA graphs, whole 100-round run, wall time",
            f"**{wall['fedavg']:.1f} s** (rounds: {rounds['fedavg']:.1f} s)",
            f"**{wall['flea']:.1f} s**",
            f"{t['fedavg_wall_s']} s / {t['flea_wall_s']} s",
        ],
        [
            f"vs the authors' code on an H200 ({official['fedavg']:.0f} s / {official['flea']:.0f} s a run)",
            f"{official['fedavg'] / wall['fedavg']:.1f}x wall, {official['fedavg'] / rounds['fedavg']:.1f}x "
            "rounds",
            f"{official['flea'] / wall['flea']:.0f}x",
            f"{t['fedavg_vs_official']}x / {t['flea_vs_official']}x",
        ],
        [
            "36 runs packed 16 at once under MPS, with graphs",
            f"{sum(exits)} s of sweep, {'one command' if len(exits) == 1 else f'{len(exits)} commands'}",
            "",
            f"{GRID_TARGET_S} s",
        ],
    ]
    return markdown_table(["", "FedAvg", "FLea", "target (#32)"], rows)


@fragment("speed-h100-packing")
def speed_h100_packing(archive: Archive) -> str:
    """The 36-run grid on a timeline, from its sweep log (``grid_timeline.py``'s reading)."""
    timeline = _grid_timeline()
    spans = timeline.read_spans(GRID_LOG)
    makespan = max(s.end for s in spans)
    busy = sum(s.end - s.start for s in spans)
    slots = len(set(timeline.lanes(spans)))
    _, counts = timeline.in_progress(spans, slots)
    below = sum(c < slots for c in counts[: int(makespan)])

    def span(method: str) -> str:
        took = [s.end - s.start for s in spans if s.method == method]
        return f"{min(took):.0f}-{max(took):.0f} s"

    floor = busy / slots
    return list_item(
        f"The {len(spans)} runs ran from the first start to the last end in {makespan:.0f} s, "
        f"{busy / makespan:.1f} at once on average out of {slots}, and fewer than {slots} only in the last "
        f"{below} s. A FLea run took {span('flea')} beside the others, a FedAvg run {span('fedavg')}. The "
        "sum "
        f"of the runs' times over {slots} slots, {floor:.0f} s, is the floor this order came within "
        f"{100 * (makespan / floor - 1):.0f}% of.\n"
    )


@fragment("speed-h100-release")
def speed_h100_release(archive: Archive) -> str:
    data = _by_mode_h100("gpu_h100_graphs_release_5rounds.json")
    reserved = [r["peak_gpu_reserved_mib"] / 1024 for m in data.values() for r in m.values()]
    cells = [
        f"{name} {data[m]['graphs']['median_round_s']:.3f} s a round with the release and "
        f"{data[m]['graphs_unreleased']['median_round_s']:.3f} s without"
        for m, name in (("fedavg", "FedAvg"), ("flea", "FLea"))
    ]
    return list_item(
        ", ".join(cells) + f"; peak reserved memory {min(reserved):.1f}-{max(reserved):.1f} GiB a process "
        "(`gpu_h100_graphs_release_5rounds.json`).\n"
    )


def _by_mode_h100(name: str) -> dict[str, dict[str, dict]]:
    return {method: {r["mode"]: r for r in runs} for method, runs in j(name, "methods").items()}


def _acc(run: dict) -> str:
    return f"{100 * run['best_acc']:.2f}"


@fragment("speed-h100-5round-accuracy")
def speed_h100_5round_accuracy(archive: Archive) -> str:
    """The best accuracy after the 5-round probe per mode (``gpu_h100_probe_5rounds.json``)."""
    data = _by_mode_h100("gpu_h100_probe_5rounds.json")
    order = ("sequential", "graphs", "batched")
    spread = max(
        100 * (max(r["best_acc"] for r in m.values()) - min(r["best_acc"] for r in m.values()))
        for m in data.values()
    )
    cells = {
        name: " / ".join(_acc(data[m][mode]) for mode in order)
        for m, name in (("fedavg", "FedAvg"), ("flea", "FLea"))
    }
    return list_item(
        f"After 5 rounds the best accuracy of eager, graphs and batched agrees to {spread:.2f} points "
        f"(FedAvg {cells['FedAvg']}, FLea {cells['FLea']}; `gpu_h100_probe_5rounds.json`).\n"
    )


@fragment("speed-h100-graph-targets")
def speed_h100_graph_targets(archive: Archive) -> str:
    """Issue #32's single-run targets against 100 x the mean round of 15 rounds with graphs, the eager and
    graphs rounds of the 3-round probe, and the recordings' host time (``gpu_h100_graphs_15rounds.json``)."""
    probe = _by_mode_h100("gpu_h100_probe_3rounds.json")
    long = _by_mode_h100("gpu_h100_graphs_15rounds.json")
    t = TARGETS_32

    def faster(m: str) -> str:
        eager, graphs = probe[m]["sequential"]["median_round_s"], long[m]["graphs"]["median_round_s"]
        return f"from {eager:.2f} to {graphs:.2f} s ({eager / graphs:.1f}x)"

    fedavg, flea = long["fedavg"]["graphs"], long["flea"]["graphs"]
    return list_item(
        f"FedAvg {fedavg['run_s_100']:.1f} s a run against the target of {t['fedavg_wall_s']} s, FLea "
        f"{flea['run_s_100']:.0f} s against {t['flea_wall_s']} s. Graphs take a FedAvg round "
        f"{faster('fedavg')} "
        f"and a FLea round {faster('flea')} (eager: the 3-round probe's median). Recording costs "
        f"{fedavg['step_graphs']['record_s']:.1f} s of host time a FedAvg run "
        f"({fedavg['step_graphs']['captured']} "
        f"shapes, once) and {flea['step_graphs']['record_s']:.1f} s in {flea['rounds']} FLea rounds "
        f"({flea['step_graphs']['captured']} recordings): about "
        f"{flea['step_graphs']['record_s'] / flea['rounds']:.1f} s of FLea's {flea['median_round_s']:.2f} s "
        "round.\n"
    )


@fragment("speed-h100-3round-accuracy")
def speed_h100_3round_accuracy(archive: Archive) -> str:
    data = _by_mode_h100("gpu_h100_probe_3rounds.json")
    parts = []
    for m, name in (("fedavg", "FedAvg"), ("flea", "FLea")):
        runs = data[m]
        spread = 100 * (max(r["best_acc"] for r in runs.values()) - min(r["best_acc"] for r in runs.values()))
        parts.append(
            f"{spread:.2f} points for {name} ({_acc(runs['sequential'])}, {_acc(runs['batched'])} batched, "
            f"{_acc(runs['graphs'])} graphs)"
        )
    return list_item(
        "After 3 rounds the best accuracy of the three modes lies within "
        + " and within ".join(parts)
        + ".\n"
    )


@fragment("speed-h100-batched")
def speed_h100_batched(archive: Archive) -> str:
    probe = _by_mode_h100("gpu_h100_probe_3rounds.json")
    h200 = _by_mode_h100("gpu_h200.json")

    def ratio(data: dict, m: str, a: str, b: str) -> float:
        return data[m][a]["median_round_s"] / data[m][b]["median_round_s"]

    now = [ratio(probe, m, "sequential", "batched") for m in ("fedavg", "flea")]
    then = [ratio(h200, m, "sequential", "batched") for m in ("fedavg", "flea")]
    graphs = sorted(ratio(probe, m, "batched", "graphs") for m in ("fedavg", "flea"))
    return list_item(
        f"Batched against sequential, 3 rounds: {_x(now[0])} for FedAvg, {_x(now[1])} for FLea; on the H200 "
        f"before their optimizer became one flat update {_x(then[0])} and {_x(then[1])} (`gpu_h200.json`); "
        f"graphs {graphs[0]:.1f}-{graphs[1]:.1f}x faster than batched.\n"
    )


@fragment("speed-h100-mempool")
def speed_h100_mempool(archive: Archive) -> str:
    flea = _by_mode_h100("gpu_h100_graph_memory.json")["flea"]["graphs_shared_mempool_rejected"]
    return list_item(
        f"{flea['step_graphs']['eager']:,} of FLea's steps ran eagerly ({flea['median_round_s']:.2f} s a "
        "round, "
        "`gpu_h100_graph_memory.json`).\n"
    )


# --- the H200 section: gpu_h200.json, gpu_py_on_cpu_8rounds.json, step_ops_cpu.json ------------------------


@fragment("speed-h200-alone")
def speed_h200_alone(archive: Archive) -> str:
    data = j("gpu_h200.json")
    runs = _by_mode_h100("gpu_h200.json")
    peak = data["device_peak_tflops"]
    tflops = runs["fedavg"]["sequential"]["achieved_tflops"]
    official = data["official_code_h200_round_s"]
    return list_item(
        f"A HARNet step is {data['model_gflop_per_train_sample']:.3f} GFLOP per sample (forward + backward): "
        f"FedAvg's sequential TFLOP/s (table) is {100 * tflops / peak['fp32']:.0f}% of the card's "
        f"{peak['fp32']:.0f} TFLOP/s FP32 peak ({100 * tflops / peak['tf32']:.1f}% of TF32). A run alone is "
        f"{_x(runs['fedavg']['sequential']['speedup_vs_official_h200'])} (FedAvg) and "
        f"{_x(runs['flea']['sequential']['speedup_vs_official_h200'])} (FLea) as fast as the FLea authors' "
        "code "
        f"({official['fedavg']} s and {official['flea']:.0f} s per round on an H200, quoted in issue #32, "
        "not "
        "re-measured).\n"
    )


@fragment("speed-h200-ratios")
def speed_h200_ratios(archive: Archive) -> str:
    runs = _by_mode_h100("gpu_h200.json")
    batched = [runs[m]["sequential"]["median_round_s"] / runs[m]["batched"]["median_round_s"] for m in runs]
    packed = [runs[m]["packed"]["runs_per_hour"] / runs[m]["sequential"]["runs_per_hour"] for m in runs]
    workers = runs["fedavg"]["packed"]["workers"]
    return list_item(
        f"Batched clients: {_x(batched[0])} the sequential loop's speed for FedAvg, {_x(batched[1])} for "
        "FLea; "
        f"{workers} packed runs: {packed[0]:.1f}x (FedAvg) and {packed[1]:.1f}x (FLea) the runs per hour of "
        "one "
        "run at a time (`gpu_h200.json`).\n"
    )


@fragment("speed-h200-accuracy")
def speed_h200_accuracy(archive: Archive) -> str:
    gpu = _by_mode_h100("gpu_h200.json")
    cpu = _by_mode_h100("gpu_py_on_cpu_8rounds.json")

    def gap(data: dict, m: str) -> float:
        return 100 * abs(data[m]["sequential"]["best_acc"] - data[m]["batched"]["best_acc"])

    return list_item(
        f"After {j('gpu_h200.json', 'rounds')} rounds the best accuracy of the sequential and batched runs "
        f"differs by {gap(gpu, 'fedavg'):.2f} points for FedAvg and {gap(gpu, 'flea'):.1f} for FLea on the "
        f"H200 (`gpu_h200.json`); on the CPU (`gpu_py_on_cpu_8rounds.json`) FedAvg "
        f"{_acc(cpu['fedavg']['sequential'])} sequential and {_acc(cpu['fedavg']['batched'])} batched, FLea "
        f"{_acc(cpu['flea']['sequential'])} and {_acc(cpu['flea']['batched'])}: float32 rounding alone moves "
        f"FLea's early best by {gap(cpu, 'flea'):.1f} points on a CPU.\n"
    )


@fragment("speed-step-ops-table")
def speed_step_ops_table(archive: Archive) -> str:
    """ATen operations per local step, eager and with graphs (``step_ops_cpu.json``)."""
    rows = {(r["method"], r["cuda_graphs"]): r["ops_per_step"] for r in j("step_ops_cpu.json", "rows")}
    methods = ("fedavg", "flea")

    def cells(graphs: bool, key: str, digits: int) -> list[str]:
        return [f"{rows[m, graphs][key]:.{digits}f}" for m in methods]

    body = [
        ["eager, outside the optimizer", *cells(False, "loop", 1)],
        [
            "eager, inside `Adam.step` (CPU: one tensor at a time; CUDA's foreach Adam: about a dozen "
            "launches)",
            *cells(False, "optimizer", 0),
        ],
        ["with graphs, outside the recorded step", *cells(True, "loop", 1)],
        ["with graphs, the recorded step (one replay on a GPU)", *cells(True, "recorded", 0)],
    ]
    return markdown_table(["per local step", "FedAvg", "FLea"], body)
