"""Prints ``DEFAULT_ROUND_RATIO`` (:mod:`fedaug.experiments.round_ratio`) as computed from the archived runs
under ``studies/``: paste it over the table after archiving new runs (a unit test compares the two).

Usage::

    python scripts/round_ratios.py
"""

from __future__ import annotations

from pathlib import Path

from fedaug.experiments.round_ratio import archived_ratios

STUDIES = Path(__file__).resolve().parents[1] / "studies"

if __name__ == "__main__":
    print("DEFAULT_ROUND_RATIO: dict[str, float] = {")
    for method, ratio in archived_ratios(STUDIES).items():
        print(f'    "{method}": {ratio},')
    print("}")
