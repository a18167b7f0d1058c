"""Rewrites the absolute paths in the committed archives (``studies/``, ``benchmarks/results/``) once.

``fedaug archive`` and the benchmarks write portable files (:mod:`fedaug.results.portable`); archives written
before they did, or copied in by hand, are made portable by running this from the repository root:

    python scripts/portable_archives.py            # rewrites, prints what changed
    python scripts/portable_archives.py --check    # exit 1 and the files if any holds an absolute path

Idempotent: a second run changes nothing. Gzipped members stay gzip (no time or name in the header); study
READMEs and scripts are documentation, not archives, and are left alone.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from fedaug.results.portable import absolute_paths, archive_files, portable_file, read_text

ROOTS = ("studies", "benchmarks/results")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report files with absolute paths")
    args = parser.parse_args()
    listed = subprocess.run(["git", "ls-files", *ROOTS], capture_output=True, text=True, check=True)
    files = archive_files(Path(name) for name in listed.stdout.splitlines())
    if args.check:
        bad = [
            f"{path}: {absolute_paths(read_text(path))[0]}"
            for path in files
            if absolute_paths(read_text(path))
        ]
        print("\n".join(bad) if bad else f"{len(files)} archive files, no absolute path")
        return 1 if bad else 0
    changed = [path for path in files if portable_file(path)]
    print(f"rewrote {len(changed)} of {len(files)} archive files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
