"""Where a run waits for the GPU: host-device synchronisations per round, by source line -> JSON.

Packed runs (``fedaug sweep --workers 16`` on one GPU) ran each round 2.6x slower than a run alone on an
H200, and FLea's share phase 19x slower than on a CPU (``studies/speed/README.md``, "On a GPU"). One
explanation: the runs' CUDA contexts take turns on the GPU, so every synchronisation (``.item()``, a copy to
the host, a blocking copy to the device) waits for this run's next turn. This script counts them: it runs
``--rounds`` rounds of each method on the default preset with ``torch.cuda.set_sync_debug_mode("warn")``,
which warns at every synchronising CUDA call, and groups the warnings by the Python line that made the call.

Usage (CUDA only)::

    python benchmarks/gpu_syncs.py --out benchmarks/results/gpu_syncs_<card>.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from machine import benchmark_device, machine_facts  # benchmarks/ is on sys.path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from fedaug.engine.checkpoint import read_jsonl  # noqa: E402
from fedaug.experiments.load import load_config  # noqa: E402
from fedaug.experiments.runner import run_experiment  # noqa: E402
from fedaug.reproducibility.identity import run_dir_for  # noqa: E402

DEFAULT = REPO / "configs" / "default.yaml"


def count_syncs(method: str, rounds: int, device: str, out_dir: Path) -> dict[str, Any]:
    """``rounds`` rounds of ``method`` with sync warnings on: the count per source line and per round."""
    overrides = [
        f"method={method}",
        "compare=[]",
        f"engine.device={device}",
        f"out_dir={out_dir}",
        f"train.rounds={rounds}",
        "engine.progress=false",
    ]
    config = load_config([DEFAULT], overrides)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run_experiment(config, fresh=True)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchronizing" in str(w.message)]
    where = Counter(
        f"{Path(w.filename).relative_to(REPO) if REPO in Path(w.filename).parents else w.filename}:{w.lineno}"
        for w in syncs
    )
    timings = read_jsonl(run_dir_for(config) / "timings.jsonl")
    return {
        "method": method,
        "rounds": rounds,
        "syncs": len(syncs),
        "syncs_per_round": round(len(syncs) / rounds, 1),
        "median_round_s": sorted(t["round_time"] for t in timings)[len(timings) // 2],
        "by_line": dict(where.most_common()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="a CUDA device (default cuda)")
    parser.add_argument("--methods", default="fedavg,flea")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args()
    device = benchmark_device(args.device)
    if device.type != "cuda":
        print(
            f"{Path(sys.argv[0]).name}: error: --device must be a CUDA device, got {args.device}",
            file=sys.stderr,
        )
        return 2
    report: dict[str, Any] = {"benchmark": "gpu_syncs", **machine_facts(device), "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        report["methods"] = [
            count_syncs(m.strip(), args.rounds, args.device, Path(tmp)) for m in args.methods.split(",")
        ]
    for row in report["methods"]:
        top = list(row["by_line"].items())[:5]
        print(json.dumps({k: v for k, v in row.items() if k != "by_line"} | {"top": top}), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
