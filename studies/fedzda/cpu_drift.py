"""How far the same FedAvg run (config and seed) ends up on two kinds of CPU: the size of the ‡ in the report.

Usage::

    python studies/fedzda/cpu_drift.py studies/fedzda/runs studies/fedzda/cpu_drift/runs \
        --out studies/fedzda/cpu_drift/cpu_drift.json

For every run dir under the second root (reruns of archived runs on another CPU, with the same relative
path), compares it with the run dir at the same path under the first root: the CPU models (``env.json``), the
first round whose global test accuracy differs, the per-round difference (second minus first, points) over
all rounds, and both runs' final and last-10-round global accuracy and final class variance. Kernels round
differently on another kind of CPU (``fedaug.runtime.machine``) and 100 rounds of SGD amplify the last bit: this is
the run-to-run noise a CPU change alone adds to a number.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from burnin_drift import drift  # the same directory

ENDS = ("global_acc_final", "global_acc_last10", "class_acc_var_final")


def compare(first: Path, second: Path, rounds: int) -> dict[str, Any]:
    row = drift(second, first, from_round=1, last_round=rounds)
    row = {"first_cpu": row.pop("fedavg_cpu"), "second_cpu": row.pop("cpu"), **row}
    ends = [json.loads((d / "summary.json").read_text()) for d in (first, second)]
    for key in ENDS:
        scale = 1e4 if "var" in key else 100
        row[key] = [round(scale * s[key], 4) for s in ends]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path, help="the archived runs (e.g. studies/fedzda/runs)")
    parser.add_argument(
        "second", type=Path, help="reruns of some of them on another CPU, same relative paths"
    )
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--out", type=Path, help="also write the rows as JSON")
    args = parser.parse_args()
    rows = {}
    for summary in sorted(args.second.rglob("summary.json")):
        rel = summary.parent.relative_to(args.second)
        if (args.first / rel / "summary.json").exists():
            rows[str(rel)] = compare(args.first / rel, summary.parent, args.rounds)
    print("| run | CPUs | first different round | per-round diff, points | final % | last 10 % | class var |")
    print("|---|---|---:|---|---|---|---|")
    for name, r in rows.items():
        diff = f"{r['mean_points']:+.3f} ± {r['std_points']:.3f} (largest {r['largest_points']:+.2f})"
        ends = " | ".join(f"{a:.2f} -> {b:.2f}" for a, b in (r[k] for k in ENDS))
        cpus = f"{r['first_cpu']} -> {r['second_cpu']}"
        print(f"| {name} | {cpus} | {r['first_different_round']} | {diff} | {ends} |")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
