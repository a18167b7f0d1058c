"""Figures of the attacks: example grids (images or signals), training curves and accuracy curves (PNG).

Figures go through :mod:`fedaug.results.plots` (matplotlib's Agg backend; ``pip install fedaug[plots]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from torch import Tensor

from fedaug.results.plots import new_figure, save_figure


def markdown_links(files: Sequence[str]) -> list[str]:
    """Markdown image links to the PNG figures among ``files`` (relative: the report sits beside them)."""
    return [f"![{Path(f).stem}]({Path(f).name})" for f in files if f.endswith(".png")]


def example_grid(rows: Sequence[tuple[str, Tensor]], stem: Path, *, image: bool) -> list[Path]:
    """One row per (label, batch ``[n, C, H, W]``), the same ``n`` examples in every row.

    Images are clipped to [0, 1] and shown in grey (1 channel) or colour (3 channels); other inputs are
    drawn as the time series of their first sensor axis (``x[0, :, 0]``).
    """
    count = max(len(batch) for _, batch in rows)
    figure = new_figure(1.2 * count + 1.8, 1.25 * len(rows) + 0.3)
    for r, (label, batch) in enumerate(rows):
        for c in range(count):
            axes = figure.add_subplot(len(rows), count, r * count + c + 1)
            axes.set_xticks([])
            axes.set_yticks([])
            if c < len(batch):
                _draw(axes, batch[c].detach().float().cpu().numpy(), image)
            if c == 0:
                axes.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=7)
    return save_figure(figure, stem)


def _draw(axes: object, sample: np.ndarray, image: bool) -> None:
    if image:
        pixels = np.clip(sample, 0.0, 1.0)
        if pixels.shape[0] == 1:
            axes.imshow(pixels[0], cmap="gray", vmin=0.0, vmax=1.0)  # type: ignore[attr-defined]
        else:
            axes.imshow(pixels.transpose(1, 2, 0))  # type: ignore[attr-defined]
        return
    series = sample.reshape(sample.shape[0], sample.shape[1], -1)[0, :, 0]
    axes.plot(series, linewidth=0.8)  # type: ignore[attr-defined]


def line_plot(
    series: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float] | None]],
    stem: Path,
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    logx: bool = False,
    hline: float | None = None,
) -> list[Path]:
    """One line per label: (x, y, optional std band); optional dashed horizontal reference line."""
    figure = new_figure(6.0, 4.0)
    axes = figure.add_subplot()
    for label, (x, y, std) in series.items():
        (line,) = axes.plot(x, y, marker="o", markersize=3, linewidth=1.3, label=label)
        if std is not None:
            low = np.asarray(y) - np.asarray(std)
            high = np.asarray(y) + np.asarray(std)
            axes.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    if hline is not None:
        axes.axhline(hline, linestyle="--", color="grey", linewidth=1)
    if logx:
        axes.set_xscale("log")
    axes.set(xlabel=xlabel, ylabel=ylabel, title=title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return save_figure(figure, stem)
