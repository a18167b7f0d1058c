"""The default round-ratio table (:data:`fedaug.sweeps.round_ratio.DEFAULT_ROUND_RATIO`), rewritten from the
archived runs under ``studies/`` with the documents' generated blocks: ``python -m tools.results`` after an
import updates it, ``--check`` names it when stale (a campaign import adds methods' timings, so the table
must follow it or the unit test comparing it with the archive fails)."""

from __future__ import annotations

import re

from fedaug.sweeps.round_ratio import archived_ratios
from tools.results.common import ROOT

MODULE = ROOT / "src" / "fedaug" / "sweeps" / "round_ratio.py"
TABLE = re.compile(r"^DEFAULT_ROUND_RATIO: dict\[str, float\] = \{\n.*?^\}\n", re.S | re.M)


def table() -> str:
    """The table's source text, from the archived runs."""
    ratios = archived_ratios(ROOT / "studies")
    rows = "".join(f'    "{method}": {ratio},\n' for method, ratio in ratios.items())
    return "DEFAULT_ROUND_RATIO: dict[str, float] = {\n" + rows + "}\n"


def _current(text: str) -> re.Match[str]:
    match = TABLE.search(text)
    if match is None:
        raise SystemExit(f"no DEFAULT_ROUND_RATIO table found in {MODULE.relative_to(ROOT)}")
    return match


def stale() -> list[str]:
    """One line naming the module if its table differs from the archive's, else none."""
    if _current(MODULE.read_text()).group(0) == table():
        return []
    return [f"{MODULE.relative_to(ROOT)} DEFAULT_ROUND_RATIO: differs from the archived runs' medians"]


def write() -> None:
    """Rewrites the table in place (the rest of the module untouched)."""
    text = MODULE.read_text()
    match = _current(text)
    MODULE.write_text(text[: match.start()] + table() + text[match.end() :])
