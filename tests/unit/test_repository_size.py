"""The repository stays small enough to travel whole to a lent GPU machine.

The device tool copies the working tree (tracked files, untracked files git does not ignore, carried paths) to
the GPU machine and refuses a tree over 64 MiB. A study that commits too many figures or plain JSON lines
would block every later GPU session, so the tracked files are held under a limit that leaves room for the
data a grid carries (the 19 MiB CIFAR-10 JPEG copy, FSDD's 13 MiB) and a session's untracked outputs.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

LIMIT_MIB = 38.0
"""The device tool's 64 MiB, less 26 MiB: the largest data a grid carries (the CIFAR-10 JPEG copy, 18.5 MiB)
and 7.5 MiB for a session's untracked files. The campaign checks the real sum before it starts a lent
machine (``tools.campaign.run.data_step``: tree plus carried data against the 64 MiB); this limit keeps the
tracked tree from eating that room unnoticed."""


def tracked_sizes(root: Path) -> dict[str, int]:
    """Bytes of every file git tracks under ``root`` (deleted-but-tracked files are skipped)."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z"], check=True, capture_output=True
    ).stdout.decode()
    return {name: (root / name).stat().st_size for name in listed.split("\0") if (root / name).is_file()}


@pytest.mark.skipif(
    shutil.which("git") is None or not (REPO_ROOT / ".git").exists(), reason="needs a git checkout"
)
def test_the_tracked_tree_fits_a_gpu_machine_with_room_to_spare() -> None:
    sizes = tracked_sizes(REPO_ROOT)
    total = sum(sizes.values()) / 2**20
    by_folder: Counter[str] = Counter()
    for name, size in sizes.items():
        by_folder["/".join(name.split("/")[:2])] += size
    largest = ", ".join(f"{folder} {size / 2**20:.1f} MiB" for folder, size in by_folder.most_common(5))
    files = sorted(sizes.items(), key=lambda item: -item[1])[:8]
    largest_files = ", ".join(f"{name} {size / 2**20:.2f} MiB" for name, size in files)
    assert total <= LIMIT_MIB, (
        f"tracked files take {total:.1f} MiB, over {LIMIT_MIB} MiB (the GPU machines take at most 64 MiB, "
        f"data included); largest folders: {largest}; largest files: {largest_files}. Archive runs with "
        "`fedaug archive` (it gzips their lines); commit fewer or smaller figures "
        "(python scripts/shrink_pngs.py), no PDF copies."
    )
