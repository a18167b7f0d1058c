"""How figures are written to disk: small PNGs, PDF copies only on request.

Figures are committed with the studies, and a study's repository travels whole to a lent GPU machine under a
size limit (tests/unit/test_tree_size.py), so a PNG is written at :data:`PNG_DPI` and re-encoded with a
256-colour palette (:func:`shrink_png`: about a third of matplotlib's RGBA file, the lines and text unchanged
to the eye). A PDF copy beside each PNG is written only inside ``with pdf_copies(True):``
(``fedaug report --plots --pdf``) for a study that needs vector output.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

PNG_DPI = 100
"""Dots per inch of a written PNG (a 6.4 x 4.2 inch figure: 640 x 420 pixels)."""

PALETTE_COLOURS = 256
"""Colours of the palette a PNG is re-encoded with."""

_PDF_COPIES: ContextVar[bool] = ContextVar("pdf_copies", default=False)


@contextlib.contextmanager
def pdf_copies(enabled: bool = True) -> Iterator[None]:
    """Inside the block, :func:`save_png` also writes a PDF beside each PNG (``enabled``)."""
    token = _PDF_COPIES.set(enabled)
    try:
        yield
    finally:
        _PDF_COPIES.reset(token)


def writes_pdf() -> bool:
    """Whether figures written now get a PDF copy (:func:`pdf_copies`)."""
    return _PDF_COPIES.get()


def shrink_png(path: Path, scale: float = 1.0) -> int:
    """Re-encodes the PNG ``path`` in place with a :data:`PALETTE_COLOURS`-colour palette (no dithering,
    zlib's best compression), first resized by ``scale`` (box filter) when it is not 1; returns the new size
    in bytes; the recorded dpi, if any, is scaled with it. Without Pillow the file is left as it is."""
    try:
        from PIL import Image
    except ImportError:
        return path.stat().st_size
    with Image.open(path) as opened:
        image = opened.convert("RGB")
        dpi = opened.info.get("dpi")
    if scale != 1.0:
        width, height = image.size
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        image = image.resize(size, Image.Resampling.BOX)
    palette = image.quantize(
        colors=PALETTE_COLOURS, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE
    )
    extra = {} if dpi is None else {"dpi": tuple(round(float(d) * scale) for d in dpi)}
    palette.save(path, format="PNG", optimize=True, **extra)
    return path.stat().st_size


def save_png(figure: Any, path: Path, dpi: int = PNG_DPI) -> list[Path]:
    """Writes ``figure`` to the PNG ``path`` (palette-encoded, :func:`shrink_png`), and ``path`` with suffix
    ``.pdf`` inside :func:`pdf_copies`; returns the paths written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=dpi)
    shrink_png(path)
    paths = [path]
    if writes_pdf():
        figure.savefig(path.with_suffix(".pdf"))
        paths.append(path.with_suffix(".pdf"))
    return paths
