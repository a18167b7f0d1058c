"""Rounds the floats of committed archived runs' JSON lines (fedaug.results.compact), in place.

python scripts/compact_archives.py             # every metrics/timings.jsonl.gz git tracks
python scripts/compact_archives.py studies/x   # those under a folder
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from fedaug.results.compact import METRIC_DIGITS, TIMING_DIGITS, compact_lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folders", nargs="*", help="only the tracked archives under these (default: all)")
    args = parser.parse_args(argv)
    listed = subprocess.run(
        ["git", "ls-files", "--", *args.folders], capture_output=True, text=True, check=True
    ).stdout
    paths = [Path(p) for p in listed.split() if p.endswith(("metrics.jsonl.gz", "timings.jsonl.gz"))]
    before = sum(p.stat().st_size for p in paths)
    after = sum(
        compact_lines(p, METRIC_DIGITS if p.name.startswith("metrics") else TIMING_DIGITS) for p in paths
    )
    print(f"{len(paths)} files: {before / 2**20:.2f} MiB -> {after / 2**20:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
