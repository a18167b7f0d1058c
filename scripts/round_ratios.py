"""Prints ``DEFAULT_ROUND_RATIO`` (:mod:`fedaug.sweeps.round_ratio`) as computed from the archived runs
under ``studies/``, or with ``--write`` rewrites the table in that module in place.
``python -m tools.results`` does the same with the documents' generated blocks (and ``--check`` names
the table when stale).

Usage::

    python scripts/round_ratios.py           # print the table
    python scripts/round_ratios.py --write   # rewrite it in src/fedaug/sweeps/round_ratio.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.results import round_ratios

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the table in the module")
    args = parser.parse_args()
    if args.write:
        round_ratios.write()
        print(f"wrote {round_ratios.MODULE.relative_to(round_ratios.ROOT)}")
    else:
        print(round_ratios.table(), end="")
