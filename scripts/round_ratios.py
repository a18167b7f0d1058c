"""Prints ``DEFAULT_ROUND_RATIO`` (:mod:`fedaug.sweeps.round_ratio`) as computed from the archived runs
under ``studies/``, or with ``--write`` rewrites the table in that module in place. Run it after archiving or
importing new runs: a unit test compares the table with the archive.

Usage::

    python scripts/round_ratios.py           # print the table
    python scripts/round_ratios.py --write   # rewrite it in src/fedaug/sweeps/round_ratio.py
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from fedaug.sweeps.round_ratio import archived_ratios

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "studies"
MODULE = ROOT / "src" / "fedaug" / "experiments" / "round_ratio.py"
TABLE = re.compile(r"^DEFAULT_ROUND_RATIO: dict\[str, float\] = \{\n.*?^\}\n", re.S | re.M)


def table() -> str:
    """The table's source text, from the archived runs."""
    rows = "".join(f'    "{method}": {ratio},\n' for method, ratio in archived_ratios(STUDIES).items())
    return "DEFAULT_ROUND_RATIO: dict[str, float] = {\n" + rows + "}\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the table in the module")
    args = parser.parse_args()
    if args.write:
        text = MODULE.read_text()
        if TABLE.search(text) is None:
            raise SystemExit(f"no DEFAULT_ROUND_RATIO table found in {MODULE}")
        MODULE.write_text(TABLE.sub(lambda _: table(), text, count=1))
        print(f"wrote {MODULE.relative_to(ROOT)}")
    else:
        print(table(), end="")
