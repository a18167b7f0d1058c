"""The generated sentences of studies/speed/README.md (issue #64), each read from the JSON a benchmark
committed under ``benchmarks/results/`` or the study kept beside its README (the file named beside it)."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from tools.results.common import ROOT, Archive, fragment
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


def _item(text: str, indent: str = ITEM) -> str:
    """``text`` indented as the list item it sits in, the closing marker too (the trailing ``indent``)."""
    return "".join(f"{indent}{line}\n" for line in text.splitlines()) + indent


def _pct(fraction: float) -> str:
    return f"{100 * fraction:.0f}%"


# --- the suite's bullets: run_all.json, run_all_small_6rounds.json, engine_vs_floor_fedavg_1thread.json ----


def _case(name: str) -> dict:
    return j("run_all.json", "cases", name)


@fragment("speed-default-floor")
def speed_default_floor(archive: Archive) -> str:
    earlier = j("engine_vs_floor_fedavg_1thread.json")
    engine, floor = earlier["engine"], earlier["floor"]
    return _item(
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
    return _item(
        f"FLea's extra {_pct(extra[0])}-{_pct(extra[1])} over the plain-CE floor (default and small "
        f"presets), its share phase {share[0]:.0f}-{share[1]:.0f} ms per round (`run_all.json`).\n"
    )


@fragment("speed-small-floor")
def speed_small_floor(archive: Archive) -> str:
    six = j("run_all_small_6rounds.json", "cases")
    return _item(
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
    return _item(
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
