"""The table and example grids of ``fedaug attack invert`` (see :mod:`fedaug.attacks.invert`)."""

from __future__ import annotations

import json
import logging
import statistics
from pathlib import Path
from typing import Any

from torch import Tensor

from fedaug.runtime.figure_files import shrink_png

logger = logging.getLogger(__name__)

GROUP_KEYS = ("stage", "severity", "threat", "loss_scaling", "data", "model", "iterations", "batch_size")


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _stat(values: list[float], scale: float = 1.0, digits: int = 3) -> str:
    mean = statistics.fmean(values) * scale
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {statistics.stdev(values) * scale:.{digits}f}"


def write_table(out: Path) -> Path:
    """Rebuilds ``out/table.md`` from ``results.jsonl`` and ``floors.jsonl`` (mean ± std over batches)."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in _read(out / "results.jsonl"):
        groups.setdefault(tuple(row.get(k) for k in GROUP_KEYS), []).append(row)
    lines = [
        "| data | model | stage | protection | attacker assumes | loss scaling | MSE | SSIM (%) | PSNR (dB) "
        "| batches | iterations |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = {"untrained": 0, "converged": 1}
    for key in sorted(groups, key=lambda k: (k[4], k[5], order.get(k[0], 2), k[1], k[2], not k[3], k[6])):
        rows = groups[key]
        stage, severity, threat, scaling, data, model, iterations, _ = key
        protection = "none" if severity == 0 else f"Fed-AugMix s={severity:g}"
        assumes = {"none": "CE", "aware": "AugMix + JS", "ce": "CE"}[threat]
        lines.append(
            f"| {data} | {model} | {stage} | {protection} | {assumes} | "
            f"{'-' if severity == 0 else ('on' if scaling else 'off')} | "
            f"{_stat([r['mse'] for r in rows], digits=4)} | {_stat([r['ssim'] for r in rows], 100, 1)} | "
            f"{_stat([r['psnr'] for r in rows], digits=2)} | {len(rows)} | {iterations} |"
        )
    floors: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {}
    for row in _read(out / "floors.jsonl"):
        floors.setdefault(row["label"], {})[(row["data"], row["batch"], row["seed"], row["batch_size"])] = row
    if floors:
        lines += [
            "",
            "Reference guesses on the same images (no attack):",
            "",
            "| guess | MSE | SSIM (%) | PSNR (dB) | batches |",
            "|---|---|---|---|---|",
        ]
        for name, by_batch in floors.items():
            rows = list(by_batch.values())
            lines.append(
                f"| {name} | {_stat([r['mse'] for r in rows], digits=4)} | "
                f"{_stat([r['ssim'] for r in rows], 100, 1)} | {_stat([r['psnr'] for r in rows], digits=2)} "
                f"| {len(rows)} |"
            )
    path = out / "table.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def save_grid(grid: dict[str, tuple[Tensor, Tensor]], path: Path, *, title: str) -> Path | None:
    """One row of originals, then one row of reconstructions per setting (images in [0, 1])."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed (pip install 'fedaug[plots]'); no grid written")
        return None
    labels = list(grid)
    original = grid[labels[0]][0]
    rows = [("original", original)] + [(label, grid[label][1]) for label in labels]
    num = original.shape[0]
    fig, axes = plt.subplots(len(rows), num, figsize=(1.3 * num + 1.6, 1.3 * len(rows)), squeeze=False)
    for r, (label, images) in enumerate(rows):
        for c in range(num):
            ax = axes[r][c]
            image = images[c].permute(1, 2, 0).cpu().numpy()
            ax.imshow(image[..., 0] if image.shape[-1] == 1 else image, cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
        axes[r][0].set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    if path.suffix.lower() == ".png":
        shrink_png(path)
    plt.close(fig)
    return path
