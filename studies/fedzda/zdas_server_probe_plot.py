"""Plots zdas_server_probe.py results: per setting, global test accuracy against class variance per variant.

Usage::

    python studies/fedzda/zdas_server_probe_plot.py studies/fedzda/zdas_server_probe/*.json \\
        --out studies/fedzda/zdas_server_probe/round80.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    results = [json.loads(path.read_text()) for path in sorted(args.results)]
    cols = min(2, len(results))
    rows = -(-len(results) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 4.6 * rows), squeeze=False)
    for ax, result in zip(axes.flat, results, strict=False):
        for row in result["rows"]:
            name = row["variant"]
            style = {"fedavg": ("s", "black"), "run": ("D", "tab:red")}.get(name, ("o", "tab:blue"))
            ax.scatter(row["class_var"], row["acc"], marker=style[0], color=style[1], s=30, zorder=3)
            label = (
                name.replace("server_", "")
                .replace("batchnorm=", "bn=")
                .replace("keep_bn_stats=true", "keep BN")
            )
            ax.annotate(
                label, (row["class_var"], row["acc"]), fontsize=6, xytext=(3, 2), textcoords="offset points"
            )
        setting = Path(result["run_dir"]).parts[-3]
        ax.set(
            title=f"{setting}, round {result['round']}",
            xlabel="class variance (%²)",
            ylabel="global test acc (%)",
        )
        ax.grid(alpha=0.3)
    fig.suptitle(
        "Fed-ZDAS server step, one round from FedAvg's checkpoint (black: FedAvg, red: default step)"
    )
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=130)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
