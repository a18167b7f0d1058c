"""Figure files: a palette PNG at PNG_DPI, a PDF copy only inside pdf_copies, and shrink_png in place."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from fedaug.results.plots import new_figure
from fedaug.runtime.figure_files import PNG_DPI, pdf_copies, save_png, shrink_png, writes_pdf


def _figure() -> object:
    figure = new_figure(6.4, 4.2)
    axes = figure.add_subplot()
    for k in range(5):
        axes.plot(np.arange(100), np.sin(np.arange(100) / (k + 3)), label=f"line {k}")
    axes.legend()
    return figure


def test_a_png_is_a_palette_image_at_the_set_dpi_and_no_pdf_unless_asked(tmp_path: Path) -> None:
    paths = save_png(_figure(), tmp_path / "a" / "plot.png")
    assert paths == [tmp_path / "a" / "plot.png"]
    with Image.open(paths[0]) as image:
        assert image.mode == "P" and image.size == (round(6.4 * PNG_DPI), round(4.2 * PNG_DPI))
    assert not (tmp_path / "a" / "plot.pdf").exists()


def test_pdf_copies_adds_a_pdf_inside_the_block_only(tmp_path: Path) -> None:
    assert not writes_pdf()
    with pdf_copies():
        assert writes_pdf()
        paths = save_png(_figure(), tmp_path / "plot.png")
    assert not writes_pdf()
    assert paths == [tmp_path / "plot.png", tmp_path / "plot.pdf"]
    assert paths[1].read_bytes()[:4] == b"%PDF"


def test_shrink_png_quantises_in_place_and_scales(tmp_path: Path) -> None:
    path = tmp_path / "rgb.png"
    figure = _figure()
    figure.savefig(path, dpi=150)  # matplotlib's RGBA file, as the committed plots were
    before = path.stat().st_size
    after = shrink_png(path, scale=2 / 3)
    assert after == path.stat().st_size and after < before / 2
    with Image.open(path) as image:
        assert image.mode == "P" and image.size == (640, 420)  # 960 x 630 at 150 dpi, times 2/3
        assert len(image.getcolors(256) or []) <= 256
