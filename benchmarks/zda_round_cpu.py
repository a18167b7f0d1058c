"""Fed-ZDAC / Fed-ZDAS rounds on the CPU in Fed-ZDA's CIFAR-10 setting, by phase, beside FedAvg's -> JSON.

The setting is issue #65's grid (b): ``configs/experiments/fedzda_tables_cifar10.yaml``'s first point
(CIFAR-10 JPEG copy, BN CNN ``bn_cnn_cifar``, 100 clients, 10 a round, shards, 5 local epochs at batch 10,
seed 0, one thread). Each measurement is a fresh process running the first ``--rounds`` rounds of a method
with this checkout's ``src`` ("after") and, with ``--before REV``, that revision's ``src`` ("before",
extracted to a temporary folder); the processes alternate in order repeat by repeat, so that load from
others on the shared machine hits both alike. Fed-ZDAC and Fed-ZDAS run with ``start_round: 1`` (every timed
round is augmented) and ``--gen-iterations`` ZSDG steps (500 in the preset; fewer keeps the benchmark short:
a step's cost does not depend on how many follow, so the round at 500 steps is extrapolated from the
measured seconds per step).

Per round it records the engine's ``timings.jsonl`` (train, aggregate, eval, whole round), the process's CPU
seconds of the round and, inside it, the CPU seconds in ZSDG (``generate``: calls and steps) and in Fed-ZDAS's
server training. The last round is also the end of the run, so it holds the local (fairness) evaluation
that a full run does every 5 rounds. ``metrics_identical`` says whether every process of a method wrote the
same ``metrics.jsonl`` bytes (before and after, and across repeats).

``estimate_cpu_s`` extrapolates a full run (100 rounds; local evaluation in 20 of them; Fed-ZDA's rounds 1-79
are FedAvg's, 80-100 augmented with 500 ZSDG steps) from each tree's medians, in CPU seconds of one
thread: from round 1 (what the campaign runs now, as a ZDA run does not find the FedAvg run of the other grid)
and branched from FedAvg's round-79 checkpoint (``engine.branch_from_fedavg``; 21 rounds, 5 local
evaluations).

Usage::

    python benchmarks/zda_round_cpu.py --data-dir ../shared/data --before main \\
        --out benchmarks/results/zda_round_cpu.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from cli_startup import alternated, extract_src, git  # benchmarks/ is the script's directory
from machine import machine_facts, run_in_tree, write_report

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
EXPERIMENT = SRC / "fedaug" / "configs" / "experiments" / "fedzda_tables_cifar10.yaml"
POINT = ["seed=[0]", "partition=[{name: shards, shards_per_client: 2}]"]
PHASES = ("train", "aggregate", "eval", "round_time")
ZDA = ("fedzdac", "fedzdas")
RUN_ROUNDS, AUGMENTED_ROUNDS, LOCAL_EVALS, BRANCH_LOCAL_EVALS, GEN_STEPS = 100, 21, 20, 5, 500


def method_entry(method: str, gen_iterations: int) -> str:
    if method == "fedavg":
        return "fedavg"
    extra = ", server_batch_size: 100" if method == "fedzdas" else ""
    return f"{{name: {method}, start_round: 1, gen_iterations: {gen_iterations}{extra}}}"


def timed(owner: Any, name: str, totals: dict[str, float], key: str) -> None:
    """Replaces ``owner.name`` by a wrapper adding its CPU seconds to ``totals[key]`` (and a call count)."""
    inner: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            totals[key] = totals.get(key, 0.0) + time.process_time() - start
            totals[f"{key}_calls"] = totals.get(f"{key}_calls", 0.0) + 1

    setattr(owner, name, wrapper)


def child(method: str, rounds: int, gen_iterations: int) -> dict[str, Any]:
    """Runs the setting's first ``rounds`` rounds of ``method`` in a temporary run dir (the ``fedaug`` on
    ``sys.path``); returns its timings and the sha256 of its ``metrics.jsonl``."""
    import fedaug.methods.fedzda.method as zda
    from fedaug.config.identity import run_dir_for
    from fedaug.engine.checkpoint import read_jsonl
    from fedaug.engine.simulation import Simulation
    from fedaug.runs.runner import prepare
    from fedaug.sweeps.sweep import expand_sweep

    totals: dict[str, float] = {}
    per_round: dict[int, dict[str, float]] = {}
    timed(zda, "generate", totals, "zsdg_s")
    timed(zda.FedZDAS, "train_server", totals, "server_train_s")

    class Timed(Simulation):  # type: ignore[misc]  # imported in the function: from the tree timed
        def _round(self, state: Any, round_num: int) -> Any:
            totals.clear()
            start = time.process_time()
            try:
                return super()._round(state, round_num)
            finally:
                per_round[round_num] = {"cpu_s": time.process_time() - start, **totals}

    with tempfile.TemporaryDirectory() as tmp:
        overrides = [
            f"train.rounds={rounds}",
            f"out_dir={tmp}",
            "engine.progress=false",
            "data.variant=jpeg_lossy",
            "engine.keep_checkpoints=[]",
        ]
        entry = method_entry(method, gen_iterations)
        (point,) = expand_sweep(EXPERIMENT, overrides, [*POINT, f"method=[{entry}]"])
        config = point.config
        torch.set_num_threads(config.engine.num_threads or 1)
        run_dir = run_dir_for(config)
        run_dir.mkdir(parents=True)
        Timed(prepare(config, run_dir).spec).run()
        timings = read_jsonl(run_dir / "timings.jsonl")
        digest = hashlib.sha256((run_dir / "metrics.jsonl").read_bytes()).hexdigest()
    rows = [{**{k: t[k] for k in ("round", *PHASES)}, **per_round[t["round"]]} for t in timings]
    return {"timings": rows, "metrics_sha256": digest}


def run_child(tree: Path, method: str, args: argparse.Namespace) -> dict[str, Any]:
    argv = ["--child", method, "--rounds", str(args.rounds), "--gen-iterations", str(args.gen_iterations)]
    return run_in_tree(tree, __file__, argv, args.data_dir)


def medians(children: list[dict[str, Any]], gen_iterations: int) -> dict[str, float]:
    """Medians over every process's rounds: each phase, the round's CPU seconds, ZSDG's CPU seconds per
    generation and per step, the server training's; and the local evaluation's extra eval seconds (the
    last round's eval phase over the others')."""
    rows = [t for c in children for t in c["timings"]]
    out = {k: statistics.median(r[k] for r in rows) for k in (*PHASES, "cpu_s")}
    last = max(r["round"] for r in rows)
    early = [r for r in rows if r["round"] < last]
    # Rounds before the last one: no local evaluation (the CPU of a plain round)
    out["cpu_s_no_local_eval"] = statistics.median(r["cpu_s"] for r in early)
    out["local_eval_s"] = statistics.median(
        r["eval"] for r in rows if r["round"] == last
    ) - statistics.median(r["eval"] for r in early)
    if any("zsdg_s" in r for r in rows):
        per_call = [r["zsdg_s"] / r["zsdg_s_calls"] for r in rows]
        out["zsdg_s_per_round"] = statistics.median(r["zsdg_s"] for r in rows)
        out["zsdg_s_per_generation"] = statistics.median(per_call)
        out["zsdg_ms_per_step"] = 1000 * out["zsdg_s_per_generation"] / gen_iterations
        out["generations_per_round"] = statistics.median(r["zsdg_s_calls"] for r in rows)
    if any("server_train_s" in r for r in rows):
        out["server_train_s"] = statistics.median(r["server_train_s"] for r in rows)
    return {k: round(v, 4) for k, v in out.items()}


def estimate(
    fedavg: dict[str, float], zda: dict[str, dict[str, float]], gen_iterations: int
) -> dict[str, Any]:
    """Full-run CPU seconds (one thread), extrapolated from the medians (module docstring)."""
    plain = fedavg["cpu_s_no_local_eval"]
    local = fedavg["local_eval_s"]
    out: dict[str, Any] = {"fedavg": round(RUN_ROUNDS * plain + LOCAL_EVALS * local)}
    for name, m in zda.items():
        extra_steps = m["generations_per_round"] * (GEN_STEPS - gen_iterations)
        augmented = m["cpu_s_no_local_eval"] + extra_steps * m["zsdg_ms_per_step"] / 1000
        burn_in = RUN_ROUNDS - AUGMENTED_ROUNDS
        out[name] = {
            "augmented_round_s": round(augmented, 1),
            "from_round_1_s": round(burn_in * plain + AUGMENTED_ROUNDS * augmented + LOCAL_EVALS * local),
            "branched_s": round(AUGMENTED_ROUNDS * augmented + BRANCH_LOCAL_EVALS * local),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=2, help="rounds per process (the last: local eval)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--gen-iterations", type=int, default=50, help="ZSDG steps (the preset: 500)")
    parser.add_argument("--methods", default="fedavg,fedzdac,fedzdas")
    parser.add_argument("--before", help="a git revision whose src/ is timed beside this checkout's")
    parser.add_argument("--data-dir", help="datasets folder (default: $FEDAUG_DATA)")
    parser.add_argument("--out", default="benchmarks/results/zda_round_cpu.json")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.rounds, args.gen_iterations)))
        return
    methods = args.methods.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"after": SRC}
        if args.before:
            trees = {"before": extract_src(args.before, Path(tmp)), **trees}
        runs = alternated(trees, methods, args.repeats, lambda tree, m: run_child(tree, m, args))
    report: dict[str, Any] = {
        "command": "python benchmarks/zda_round_cpu.py "
        + " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in vars(args).items()
            if k in ("rounds", "repeats", "gen_iterations", "methods", "before") and v is not None
        ),
        "before_commit": git("rev-parse", args.before) if args.before else None,
        "after_commit": git("rev-parse", "HEAD"),
        "setting": "fedzda_tables_cifar10: cifar10 (JPEG q75 copy), shards 2, K = 100, bn_cnn_cifar, seed 0",
        "clock": "process CPU seconds (one thread); phases: the engine's wall seconds",
    }
    for method in methods:
        digests = {c["metrics_sha256"] for children in runs[method].values() for c in children}
        report[method] = {tree: medians(c, args.gen_iterations) for tree, c in runs[method].items()}
        report[method]["round_cpu_s"] = {
            tree: [[round(t["cpu_s"], 2) for t in c["timings"]] for c in children]
            for tree, children in runs[method].items()
        }
        report[method]["metrics_identical"] = len(digests) == 1
        if "before" in trees:
            # per repeat (the processes of one repeat ran next to each other), then the median
            ratios = {
                key: statistics.median(
                    medians([b], args.gen_iterations)[key] / medians([a], args.gen_iterations)[key]
                    for a, b in zip(runs[method]["after"], runs[method]["before"], strict=True)
                )
                for key in ("cpu_s", *(("zsdg_ms_per_step",) if method in ZDA else ()))
            }
            report[method]["before_over_after"] = {k: round(v, 3) for k, v in ratios.items()}
    if "fedavg" in methods:
        report["estimate_cpu_s"] = {
            tree: estimate(
                report["fedavg"][tree], {m: report[m][tree] for m in methods if m in ZDA}, args.gen_iterations
            )
            for tree in trees
        }
    report.update(machine_facts(torch.device("cpu")))
    write_report(args.out, report, echo=False)


if __name__ == "__main__":
    main()
