"""Where a run waits for the GPU: host reads / synchronisations per round, by source line -> JSON.

Packed runs (``fedaug sweep --workers 16`` on one GPU) ran each round 2.6x slower than a run alone on an
H200, and FLea's share phase 19x slower than on a CPU (``studies/speed/README.md``, "On a GPU"). One
explanation: the runs' CUDA contexts take turns on the GPU, so every synchronisation (``.item()``, a copy to
the host, a copy to the device from unpinned memory) waits for this run's next turn. This script counts them
for ``--rounds`` rounds of each method on the default preset:

* on any device, the host reads fedaug's code asks for (:class:`tools.host_reads.HostReadCounter`:
  ``.item()``, ``.tolist()``, ``.cpu()``, boolean-mask indexing, ``nonzero``, ``bincount``...), per round
  and by the fedaug source line that made them; on a CPU this is an upper bound of a GPU run's syncs;
* on CUDA also ``torch.cuda.set_sync_debug_mode("warn")``'s warnings (every synchronising CUDA call that
  PyTorch makes, checkpoint copies included), grouped by the Python line that made the call.

Usage::

    python benchmarks/host_syncs.py --device cpu --out benchmarks/results/host_reads_cpu.json
    python benchmarks/host_syncs.py --device cuda --out benchmarks/results/gpu_syncs_<card>.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from machine import (  # benchmarks/ is on sys.path
    add_device_argument,
    benchmark_device,
    machine_facts,
    write_report,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from fedaug.config.identity import run_dir_for  # noqa: E402
from fedaug.config.load import load_config  # noqa: E402
from fedaug.engine.checkpoint import read_jsonl  # noqa: E402
from fedaug.engine.simulation import SimulationSpec  # noqa: E402
from fedaug.errors import FedaugError  # noqa: E402
from fedaug.runs.runner import run_experiment  # noqa: E402
from tools.host_reads import HostReadCounter, RoundReads  # noqa: E402

DEFAULT = REPO / "configs" / "default.yaml"


def _where(caught: list[warnings.WarningMessage]) -> list[str]:
    """``sync:<file>:<line>`` of each sync-debug warning."""
    out = []
    for w in caught:
        if "synchroniz" not in str(w.message):
            continue
        path = Path(w.filename)
        name = path.relative_to(REPO).as_posix() if REPO in path.parents else w.filename
        out.append(f"sync:{name}:{w.lineno}")
    return out


def count(method: str, rounds: int, device: torch.device, out_dir: Path, extra: list[str]) -> dict[str, Any]:
    """``rounds`` rounds of ``method``: host reads (and on CUDA sync warnings) per round and by line."""
    overrides = [
        f"method={method}",
        "compare=[]",
        f"engine.device={device}",
        f"out_dir={out_dir}",
        f"train.rounds={rounds}",
        "engine.progress=false",
        *extra,
    ]
    config = load_config([DEFAULT], overrides)
    reads = HostReadCounter()
    sims: list[RoundReads] = []
    cuda = device.type == "cuda"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        def engine(spec: SimulationSpec) -> RoundReads:
            sims.append(RoundReads(spec, lambda: Counter(reads.counts) + Counter(_where(caught))))
            return sims[-1]

        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            with reads.counting():
                run_experiment(config, fresh=True, engine=engine)
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
        per_round = sims[-1].per_round()
    # the rounds after the first (FLea's first has no buffer yet), the last without its final checkpoint
    steady = [r for r in per_round if 1 < r < rounds] or list(per_round)
    reads_per_round = [sum(v for k, v in per_round[r].items() if not k.startswith("sync:")) for r in steady]
    syncs_per_round = [sum(v for k, v in per_round[r].items() if k.startswith("sync:")) for r in steady]
    typical = per_round[steady[len(steady) // 2]]
    timings = read_jsonl(run_dir_for(config) / "timings.jsonl")
    row: dict[str, Any] = {
        "method": method,
        "rounds": rounds,
        "steady_rounds": steady,
        "host_reads_per_round": statistics.median(reads_per_round),
        "host_reads_round_1": sum(v for k, v in per_round[1].items() if not k.startswith("sync:")),
        "median_round_s": round(statistics.median(t["round_time"] for t in timings), 4),
    }
    if cuda:
        row["cuda_syncs_per_round"] = statistics.median(syncs_per_round)
    row["by_line"] = dict(typical.most_common())
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_device_argument(parser)
    parser.add_argument("--methods", default="fedavg,flea")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per method (>= 3; default 4)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override, e.g. train.local_epochs=1",
    )
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args()
    if args.rounds < 3:
        print(f"{Path(sys.argv[0]).name}: error: --rounds must be >= 3, got {args.rounds}", file=sys.stderr)
        return 2
    device = benchmark_device(args.device)
    report: dict[str, Any] = {
        "benchmark": "host_syncs",
        **machine_facts(device),
        "torch": torch.__version__,
        "preset": "configs/default.yaml",
        "overrides": args.set,
    }
    with tempfile.TemporaryDirectory() as tmp:
        try:
            report["methods"] = [
                count(m.strip(), args.rounds, device, Path(tmp), args.set) for m in args.methods.split(",")
            ]
        except FedaugError as exc:  # a bad --methods or --set: one line, as fedaug says it
            print(f"{Path(sys.argv[0]).name}: error: {exc}", file=sys.stderr)
            return 2
    for row in report["methods"]:
        top = list(row["by_line"].items())[:6]
        print(json.dumps({k: v for k, v in row.items() if k != "by_line"} | {"top": top}), flush=True)
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
