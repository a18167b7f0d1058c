"""FLea's round on the CPU on the CIFAR-10 stand-in setting, phase by phase, beside FedAvg's -> JSON.

The setting is issue #65's grid (a): ``configs/experiments/flea_cifar10_standin.yaml``'s first point (CIFAR-10
JPEG copy, K = 500, Qua(3), the BN-CNN stand-in model ``bn_cnn_cifar``, 50 clients a round, 5 local epochs,
one thread). Each measurement is a fresh process running the first ``--rounds`` rounds of FLea or FedAvg with
this checkout's ``src`` ("after") and, with ``--before REV``, that revision's ``src`` ("before", extracted to
a temporary folder); the processes alternate in order repeat by repeat (before-after, after-before), so that
load from others on a shared machine hits all alike. Round 1 is FLea's warm-up (empty buffer), so the round
times are the medians of rounds 2.. (the engine's ``timings.jsonl``: local training, share phase,
evaluation, whole round; and the process's CPU time of the round, less sensitive to others' load on a
shared machine); the ratios compare them (FLea over FedAvg, after over before) repeat by repeat, as the
processes of one repeat ran next to each other, and give their median. Every process's
``metrics.jsonl`` records are compared with the first of the same method: ``metrics_identical`` says the
trees (and the repeats) trained bit for bit alike.

``--phases`` adds one more process per method (this checkout) whose last round runs under ``cProfile``: the
round's seconds split into local training (the loss's forward parts: encoder, local head passes, the frozen
global head of L_dis, dCor of L_dec, mixing and soft labels and the rest of the loss; backward; optimizer;
the loop's own work), client set-up, share phase, aggregation and evaluation. cProfile slows Python calls,
so read the fractions, not the seconds.

Usage::

    python benchmarks/flea_round_cpu.py --data-dir ../shared/data --before main --phases \\
        --out benchmarks/results/flea_round_cpu.json
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from cli_startup import alternated, extract_src, git  # benchmarks/ is the script's directory
from machine import machine_facts, run_in_tree, write_report

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
EXPERIMENT = SRC / "fedaug" / "configs" / "experiments" / "flea_cifar10_standin.yaml"
POINT = ["seed=[0]", "partition=[{name: quantity, classes_per_client: 3}]"]
PHASES = ("train", "share", "eval", "round_time")

# (file suffix, function name) of the profiled functions the phases are read from
PROFILED = {
    "round": ("engine/simulation.py", "_round"),
    "client_update": ("training/client.py", "client_update"),
    "train_local": ("training/loop.py", "train_local"),
    "loss": ("training/objective.py", "__call__"),
    "plain_loss": ("training/loop.py", "cross_entropy_loss"),
    "encode": ("models/base.py", "encode"),
    "decode": ("models/base.py", "decode"),
    "head_passes": ("methods/flea/head_passes.py", "separate_passes"),
    "fused_head_passes": ("methods/flea/head_passes.py", "fused_passes"),
    "distill": ("methods/flea/loss.py", "value"),
    "decor": ("privacy/dcor.py", "decorrelation_loss"),
    "with_terms": ("methods/flea/loss.py", "with_terms"),
    "backward": ("torch/_tensor.py", "backward"),
    "step": ("torch/optim/optimizer.py", "wrapper"),
    "zero_grad": ("torch/optim/optimizer.py", "zero_grad"),
    "share": ("engine/simulation.py", "_share"),
    "aggregate": ("methods/fedavg.py", "server_update"),
    "evaluate": ("engine/simulation.py", "_evaluate"),
}


def child(method: str, rounds: int, profile: bool) -> dict[str, Any]:
    """Runs the setting's first ``rounds`` rounds of ``method`` in a temporary run dir (the ``fedaug`` on
    ``sys.path``); returns its timings, metrics and, with ``profile``, the last round's profiled phases."""
    from fedaug.config.identity import run_dir_for
    from fedaug.engine.checkpoint import read_jsonl
    from fedaug.engine.simulation import Simulation
    from fedaug.runs.runner import prepare
    from fedaug.sweeps.sweep import expand_sweep

    profiler = cProfile.Profile()
    cpu_s: dict[int, float] = {}

    class Profiled(Simulation):  # type: ignore[misc]  # imported in the function: from the tree timed
        def _round(self, state: Any, round_num: int) -> Any:
            last = profile and round_num == rounds
            if last:
                profiler.enable()
            start = time.process_time()
            try:
                return super()._round(state, round_num)
            finally:
                cpu_s[round_num] = time.process_time() - start
                if last:
                    profiler.disable()

    with tempfile.TemporaryDirectory() as tmp:
        overrides = [f"train.rounds={rounds}", f"out_dir={tmp}", "engine.progress=false"]
        (point,) = expand_sweep(EXPERIMENT, overrides, [*POINT, f"method=[{method}]"])
        config = point.config
        torch.set_num_threads(config.engine.num_threads or 1)
        run_dir = run_dir_for(config)
        run_dir.mkdir(parents=True)
        Profiled(prepare(config, run_dir).spec).run()
        timings = read_jsonl(run_dir / "timings.jsonl")
        metrics = read_jsonl(run_dir / "metrics.jsonl")
    out: dict[str, Any] = {
        "timings": [{**{k: t[k] for k in ("round", *PHASES)}, "cpu_s": cpu_s[t["round"]]} for t in timings],
        "metrics": metrics,
    }
    if profile:
        out["phases"] = phases(pstats.Stats(profiler))
    return out


def phases(stats: pstats.Stats) -> dict[str, float]:
    """The profiled round's seconds by phase (cumulative times of :data:`PROFILED`; the loss's parts by
    their caller, so that the share phase's encoder passes are not counted as training)."""
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    found = {
        name: key
        for key in table
        for name, (path, func) in PROFILED.items()
        if key[0].endswith(path) and key[2] == func
    }

    def cum(name: str) -> float:
        return float(table[found[name]][3]) if name in found else 0.0

    def cum_from(name: str, caller: str) -> float:
        """Cumulative seconds of ``name`` when called from a function named ``caller``."""
        if name not in found:
            return 0.0
        callers = table[found[name]][4]
        return float(sum(v[3] for k, v in callers.items() if k[2] == caller))

    loss = cum("loss") + cum("plain_loss")  # FLea's loss hook, or FedAvg's plain cross-entropy
    encode = cum_from("encode", "loss_fn")
    heads = cum("head_passes") + cum("fused_head_passes")
    # the warm-up and FedAvg have no head-pass helper: their head is one decode in the loss itself
    heads = heads or cum_from("decode", "loss_fn")
    distill, decor = cum("distill"), cum_from("decor", "<lambda>")
    train = cum("train_local")
    backward, step, zero = cum("backward"), cum("step"), cum("zero_grad")
    parts = {
        "round": cum("round"),
        "local_training": train,
        "loss_forward": loss,
        "loss.encoder": encode,
        "loss.local_head_passes": heads,
        "loss.global_head_L_dis": distill,
        "loss.dcor_L_dec": decor,
        "loss.mixing_soft_labels_rest": loss - encode - heads - distill - decor,
        "backward": backward,
        "optimizer_step": step + zero,
        "loop_own_work": train - loss - backward - step - zero,
        "client_setup": cum("client_update") - train,
        "share_phase": cum("share"),
        "aggregation": cum("aggregate"),
        "evaluation": cum("evaluate"),
    }
    return {k: round(v, 3) for k, v in parts.items()}


def in_process(clients: int, repeats: int) -> dict[str, Any]:
    """Round 2's first ``clients`` client updates of FLea and of FedAvg (from FLea's round-1 model, with its
    buffer) in this process, the code of this tree ("after") against the code before this change emulated
    ("before": torch's own optimizer choice on a CPU, the buffer padded contiguous for every client), in
    alternating order; the thread's CPU seconds per variant and repeat, and whether the updates are equal."""
    from fedaug.config.identity import run_dir_for
    from fedaug.engine.sampling import sample_clients
    from fedaug.engine.simulation import Simulation, round_train_settings
    from fedaug.methods.fedavg import FedAvg
    from fedaug.methods.flea.loss import padded_buffer
    from fedaug.methods.flea.method import FLea
    from fedaug.runs.runner import prepare
    from fedaug.sweeps.sweep import expand_sweep
    from fedaug.training import loop

    with tempfile.TemporaryDirectory() as tmp:
        overrides = ["train.rounds=2", f"out_dir={tmp}", "engine.progress=false"]
        (point,) = expand_sweep(EXPERIMENT, overrides, [*POINT, "method=[flea]"])
        config = point.config
        torch.set_num_threads(config.engine.num_threads or 1)
        run_dir = run_dir_for(config)
        run_dir.mkdir(parents=True)
        sim = Simulation(prepare(config, run_dir).spec)
        sim.store.prepare()
        state, _ = sim._start()
        state, _, _ = sim._round(state, 1)  # the warm-up: round 2 mixes with its buffer
    spec = sim.spec
    flea = spec.method
    train = round_train_settings(spec.train_settings, spec.precision, 2, cuda_graphs=False)
    payload = flea.payload(state, 2, train)
    ids = sample_clients(spec.run.seed, 2, spec.run.num_clients, spec.clients_per_round)[:clients]
    methods: dict[str, Any] = {"flea": flea, "fedavg": FedAvg()}

    def updates(method: Any, before: bool) -> tuple[float, list[Any]]:
        saved = (loop.cpu_foreach, FLea.padded)
        if before:  # the code before: torch's choice (per parameter on a CPU), the buffer padded per client
            loop.cpu_foreach = lambda params: None
            FLea.padded = lambda self, buffer, memory_format: padded_buffer(buffer)
        try:
            start = time.thread_time()
            out = [method.client_update(payload, sim._client_context(c, 2, "client")) for c in ids]
            return time.thread_time() - start, out
        finally:
            loop.cpu_foreach, FLea.padded = saved

    seconds: dict[str, list[float]] = {f"{m}.{v}": [] for m in methods for v in ("before", "after")}
    equal = {}
    for name, method in methods.items():  # warm-up, and the equality check
        _, old = updates(method, True)
        _, new = updates(method, False)
        equal[name] = all(
            torch.equal(a.model_state[k], b.model_state[k]) and a.metrics == b.metrics
            for a, b in zip(old, new, strict=True)
            for k in a.model_state
        )
    for repeat in range(repeats):
        for name, method in methods.items():
            for variant in ("before", "after") if repeat % 2 == 0 else ("after", "before"):
                seconds[f"{name}.{variant}"].append(updates(method, variant == "before")[0])
    ratios = {
        f"{m}.after_over_before": [
            round(a / b, 3) for a, b in zip(seconds[f"{m}.after"], seconds[f"{m}.before"], strict=True)
        ]
        for m in methods
    }
    ratios["flea_over_fedavg.after"] = [
        round(a / b, 3) for a, b in zip(seconds["flea.after"], seconds["fedavg.after"], strict=True)
    ]
    return {
        "clients": clients,
        "repeats": repeats,
        "thread_cpu_s": {k: [round(v, 3) for v in vs] for k, vs in seconds.items()},
        "median_thread_cpu_s": {k: round(statistics.median(vs), 3) for k, vs in seconds.items()},
        "ratios": ratios,
        "median_ratios": {k: round(statistics.median(v), 3) for k, v in ratios.items()},
        "updates_identical": equal,
    }


def run_child(tree: Path, method: str, rounds: int, data_dir: str | None, profile: bool) -> dict[str, Any]:
    argv = ["--child", method, "--rounds", str(rounds), *(["--phases"] if profile else [])]
    return run_in_tree(tree, __file__, argv, data_dir)


def summary(children: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the processes' rounds 2.. of each phase (wall clock, and the process's CPU time of the
    whole round), and every process's round times."""
    rows = [t for c in children for t in c["timings"] if t["round"] >= 2]
    return {
        "median_s": {p: round(statistics.median(r[p] for r in rows), 3) for p in (*PHASES, "cpu_s")},
        "round_times_s": [[round(t["round_time"], 2) for t in c["timings"]] for c in children],
        "round_cpu_s": [[round(t["cpu_s"], 2) for t in c["timings"]] for c in children],
    }


def paired(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str) -> list[float]:
    """Per repeat, the median over rounds 2.. of ``key`` in process ``a`` over that in process ``b``."""

    def med(c: dict[str, Any]) -> float:
        return float(statistics.median(t[key] for t in c["timings"] if t["round"] >= 2))

    return [round(med(x) / med(y), 3) for x, y in zip(a, b, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per process (round 1 is the warm-up)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--methods", default="flea,fedavg")
    parser.add_argument("--before", help="a git revision whose src/ is timed beside this checkout's")
    parser.add_argument("--phases", action="store_true", help="one profiled process per method")
    parser.add_argument("--data-dir", help="datasets folder (default: $FEDAUG_DATA)")
    parser.add_argument(
        "--in-process",
        type=int,
        default=0,
        metavar="CLIENTS",
        help="instead: round 2's first CLIENTS client updates, this code against the old one emulated, in "
        "one process (--repeats times; thread CPU time; writes --out)",
    )
    parser.add_argument("--out", default="benchmarks/results/flea_round_cpu.json")
    args = parser.parse_args()
    if args.in_process:
        if args.data_dir:
            os.environ["FEDAUG_DATA"] = str(Path(args.data_dir).resolve())
        result = in_process(args.in_process, args.repeats)
        command = (
            f"python benchmarks/flea_round_cpu.py --in-process {args.in_process} --repeats {args.repeats}"
        )
        write_report(args.out, {"command": command, **result, **machine_facts(torch.device("cpu"))})
        return
    if args.child:
        print(json.dumps(child(args.child, args.rounds, args.phases)))
        return
    methods = args.methods.split(",")
    before_commit = git("rev-parse", args.before) if args.before else None
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"after": SRC}
        if args.before:
            trees = {"before": extract_src(args.before, Path(tmp)), **trees}

        def unprofiled(tree: Path, method: str) -> dict[str, Any]:
            return run_child(tree, method, args.rounds, args.data_dir, False)

        runs = alternated(trees, methods, args.repeats, unprofiled)
        profiled = (
            {m: run_child(SRC, m, args.rounds, args.data_dir, True)["phases"] for m in methods}
            if args.phases
            else {}
        )
    report: dict[str, Any] = {
        "command": "python benchmarks/flea_round_cpu.py "
        + " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in vars(args).items()
            if k in ("rounds", "repeats", "methods", "before") and v is not None
        )
        + (" --phases" if args.phases else ""),
        "before_commit": before_commit,
        "after_commit": git("rev-parse", "HEAD"),
        "setting": "flea_cifar10_standin: cifar10 (JPEG q75 copy), quantity 3, K = 500, bn_cnn_cifar, seed 0",
    }
    for method in methods:
        first = runs[method][next(iter(trees))][0]["metrics"]
        report[method] = {tree: summary(children) for tree, children in runs[method].items()}
        report[method]["metrics_identical"] = all(
            c["metrics"] == first for children in runs[method].values() for c in children
        )
        if method in profiled:
            report[method]["profiled_phases_s"] = profiled[method]
    # ratios per repeat (the processes of one repeat ran next to each other), then their median
    ratios: dict[str, Any] = {}
    pairs = []
    if "flea" in methods and "fedavg" in methods:
        pairs += [(f"flea_over_fedavg.{t}", runs["flea"][t], runs["fedavg"][t]) for t in trees]
    if "before" in trees:
        pairs += [(f"{m}.after_over_before", runs[m]["after"], runs[m]["before"]) for m in methods]
    for name, a, b in pairs:
        for key in ("round_time", "train", "cpu_s"):
            values = paired(a, b, key)
            ratios[f"{name}.{key}"] = {"per_repeat": values, "median": round(statistics.median(values), 3)}
    report["ratios"] = ratios
    report.update(machine_facts(torch.device("cpu")))
    write_report(args.out, report, echo=False)


if __name__ == "__main__":
    main()
