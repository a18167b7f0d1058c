"""Re-encodes committed PNGs as small palette images (fedaug.runtime.figure_files.shrink_png), in place.

A PNG recorded at more than PNG_DPI dots per inch is first scaled down to PNG_DPI (a 150-dpi plot to 2/3 of
its width and height), so that old plots match what `fedaug report --plots` writes now. A palette PNG at
PNG_DPI or less is left as it is, so running it twice changes nothing.

    python scripts/shrink_pngs.py               # every PNG git tracks
    python scripts/shrink_pngs.py studies/x/plots/*.png
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from PIL import Image

from fedaug.runtime.figure_files import PNG_DPI, shrink_png


def scale_of(path: Path) -> float | None:
    """The factor that brings ``path`` to PNG_DPI (1.0: only re-encode); None: already small."""
    with Image.open(path) as image:
        dpi = float((image.info.get("dpi") or (PNG_DPI, PNG_DPI))[0])
        mode = image.mode
    scale = min(1.0, PNG_DPI / dpi) if dpi > PNG_DPI + 0.5 else 1.0
    return None if mode == "P" and scale == 1.0 else scale


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or [
        Path(p)
        for p in subprocess.run(
            ["git", "ls-files", "*.png"], capture_output=True, text=True, check=True
        ).stdout.split()
    ]
    before = after = 0
    for path in paths:
        size = path.stat().st_size
        scale = scale_of(path)
        before += size
        after += size if scale is None else shrink_png(path, scale)
    print(f"{len(paths)} PNGs: {before / 2**20:.2f} MiB -> {after / 2**20:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
