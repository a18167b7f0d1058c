"""Archived runs' JSON lines with fewer digits: about half the bytes, the same reports.

An archived run's ``metrics.jsonl.gz`` and ``timings.jsonl.gz`` (:mod:`fedaug.results.archive`) hold floats
as Python prints them (17 significant digits), most of them noise: a test accuracy is a count over a test
set of a few thousand samples, a round time is measured to a millisecond at best. Metrics are kept to
:data:`METRIC_DIGITS` significant digits (a relative change below 5e-9, far below the 0.01 % a table
prints) and timings to :data:`TIMING_DIGITS` (0.05 %); the gzipped lines then take about half the space,
which lets a study's archives travel to a lent GPU machine beside the data
(``tests/unit/test_repository_size.py``). Rounding twice gives the same bytes. ``fedaug archive`` writes
its archives rounded so (``--full-precision`` keeps the floats as the run wrote them);
``scripts/compact_archives.py`` rounds archives committed before it did.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

METRIC_DIGITS = 8
"""Significant digits kept of an archived metric."""

TIMING_DIGITS = 4
"""Significant digits kept of an archived time (s)."""


def write_gzipped(path: Path, text: str) -> None:
    """``text`` in gzip file ``path``, byte-identical for the same text (no time or name in the header)."""
    path.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))


def rounded(value: Any, digits: int) -> Any:
    """``value`` with every float in it (in lists and mappings too) kept to ``digits`` significant digits."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}") if math.isfinite(value) else value
    if isinstance(value, list):
        return [rounded(v, digits) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    return value


def compact_text(text: str, digits: int) -> str:
    """The JSON lines ``text`` with their floats rounded (:func:`rounded`), keys sorted, no blank lines."""
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    return "".join(json.dumps(rounded(r, digits), sort_keys=True) + "\n" for r in records)


def compact_lines(path: Path, digits: int) -> int:
    """Rewrites the gzipped JSON lines ``path`` with its floats rounded (:func:`compact_text`); returns its
    size."""
    write_gzipped(path, compact_text(gzip.decompress(path.read_bytes()).decode(), digits))
    return path.stat().st_size


def compact_run(run_dir: Path) -> None:
    """Rounds an archived run's ``metrics.jsonl.gz`` and ``timings.jsonl.gz`` (those it has)."""
    for name, digits in (("metrics.jsonl.gz", METRIC_DIGITS), ("timings.jsonl.gz", TIMING_DIGITS)):
        if (run_dir / name).is_file():
            compact_lines(run_dir / name, digits)
