"""Text report and clients x classes heat-map of a partition (like the papers' label-distribution figures).

matplotlib is an optional extra (``pip install fedaug[plots]``); it is imported only inside
:func:`plot_heatmap`, which draws through the Agg canvas directly and never touches pyplot's global state.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedaug.data.partition.base import Partition
from fedaug.errors import FedaugError, path_error
from fedaug.runtime.figure_files import save_png

# Up to this many clients every client gets a row; beyond it the first and last few are shown.
_FULL_TABLE_MAX_CLIENTS = 20
_HEAD, _TAIL = 10, 5


def _rows(counts: np.ndarray, sizes_test: np.ndarray | None, clients: Sequence[int]) -> list[list[str]]:
    rows = []
    for client in clients:
        row = [str(client), str(int(counts[client].sum()))]
        if sizes_test is not None:
            row.append(str(int(sizes_test[client])))
        row += [str(int(value)) for value in counts[client]]
        rows.append(row)
    return rows


def _format_table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[col]) for row in [header, *rows]) for col in range(len(header))]
    return [
        "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
        for row in [header, *rows]
    ]


def describe(partition: Partition, labels: np.ndarray, class_names: Sequence[str] | None = None) -> str:
    """A text table of per-client sizes and class counts, followed by summary statistics.

    With more than 20 clients only the first 10 and last 5 rows are shown. The summary gives the number of
    clients and samples, min / mean / max / std of the client sizes, the mean number of classes per client,
    the number of empty clients and the total per class.

    Args:
        partition: The partition to describe.
        labels: Labels of the training set the partition indexes.
        class_names: Optional column names, one per class (default: the class ids).

    Returns:
        The report, lines separated by newlines.
    """
    counts = partition.class_counts(labels)
    names = list(class_names) if class_names is not None else [str(k) for k in range(partition.num_classes)]
    if len(names) != partition.num_classes:
        raise FedaugError(f"class_names has {len(names)} entries, expected {partition.num_classes}")
    test_sizes = None
    if partition.test_indices is not None:
        test_sizes = np.array([idx.size for idx in partition.test_indices])
    header = ["client", "train", *(["test"] if test_sizes is not None else []), *names]
    num_clients = partition.num_clients
    if num_clients <= _FULL_TABLE_MAX_CLIENTS:
        lines = _format_table(header, _rows(counts, test_sizes, range(num_clients)))
    else:
        shown = [*range(_HEAD), *range(num_clients - _TAIL, num_clients)]
        lines = _format_table(header, _rows(counts, test_sizes, shown))
        lines.insert(1 + _HEAD, f"... ({num_clients - _HEAD - _TAIL} more clients)")
    sizes = counts.sum(axis=1)
    settings = partition.settings
    title = (
        f"partition {settings.get('name', '?')} {settings.get('params', {})} seed={settings.get('seed', '?')}"
    )
    summary = [
        f"clients: {num_clients}, samples: {int(sizes.sum())}"
        + (f", local test samples: {int(test_sizes.sum())}" if test_sizes is not None else ""),
        f"client size: min {sizes.min()}, mean {sizes.mean():.1f}, max {sizes.max()}, std {sizes.std():.1f}",
        f"classes per client: mean {(counts > 0).sum(axis=1).mean():.2f}; "
        f"empty clients: {(sizes == 0).sum()}",
        "samples per class: "
        + ", ".join(f"{n}={int(c)}" for n, c in zip(names, counts.sum(axis=0), strict=True)),
    ]
    return "\n".join([title, *lines, *summary])


HEATMAP_SUFFIXES = (".png", ".pdf")
"""What :func:`plot_heatmap` writes (a PDF comes with a PNG beside it)."""


def plot_heatmap(counts: np.ndarray, path: Path, title: str) -> None:
    """Saves a clients x classes heat-map of ``counts`` (clients on x, classes on y, count as colour).

    A PNG is always written (``path`` with suffix ``.png``); if ``path`` ends in ``.pdf`` the PDF is written
    too. Any other extension is refused before anything is drawn.

    Args:
        counts: Samples per client and class, shape ``[K, C]`` (e.g. :meth:`Partition.class_counts`).
        path: Output file; parent folders are created.
        title: Figure title.

    Raises:
        FedaugError: If ``path`` does not end in .png or .pdf, matplotlib is not installed, ``counts`` is
            not 2-D, or the file cannot be written (PathError naming it).
    """
    path = Path(path)
    if path.suffix.lower() not in HEATMAP_SUFFIXES:
        raise FedaugError(
            f"heat-map path {path}: unsupported extension {path.suffix or '(none)'!r}; use "
            f"{' or '.join(HEATMAP_SUFFIXES)}"
        )
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise FedaugError("plotting needs matplotlib: pip install fedaug[plots]") from error
    counts = np.asarray(counts)
    if counts.ndim != 2:
        raise FedaugError(f"counts must be a [clients, classes] array, got shape {counts.shape}")
    num_clients, num_classes = counts.shape
    figure = Figure(
        figsize=(min(max(4.0, 0.12 * num_clients + 2.0), 16.0), max(2.5, 0.35 * num_classes + 1.2))
    )
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    image = axes.imshow(
        counts.T,
        aspect="auto",
        origin="lower",
        cmap="YlGnBu",
        interpolation="nearest",
        extent=(-0.5, num_clients - 0.5, -0.5, num_classes - 0.5),
    )
    figure.colorbar(image, ax=axes, label="samples")
    axes.set_xlabel("client")
    axes.set_ylabel("class")
    axes.set_yticks(range(num_classes))
    axes.set_title(title)
    figure.tight_layout()
    try:
        save_png(figure, path.with_suffix(".png"))
        if path.suffix.lower() == ".pdf":
            figure.savefig(path)
    except OSError as error:
        raise path_error(error, path, "write the heat-map") from error
