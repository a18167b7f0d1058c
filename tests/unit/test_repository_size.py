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
from tools.campaign.size import CHECKOUT_LIMIT_MIB, checkout_bytes

LIMIT_MIB = CHECKOUT_LIMIT_MIB
"""The limit (:data:`tools.campaign.size.CHECKOUT_LIMIT_MIB`, which says why it is what it is)."""


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


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_import_line_counts_tracked_and_new_files_and_says_when_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tools.campaign import size

    # Prepare: a checkout with a tracked file of 1 MiB, a new one of 2 MiB and an ignored one of 4 MiB
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("ignored.bin\n")
    for name, mib in (("tracked.bin", 1), ("new.bin", 2), ("ignored.bin", 4)):
        (tmp_path / name).write_bytes(b"\0" * (mib * 2**20))
    subprocess.run(["git", "-C", str(tmp_path), "add", "tracked.bin", ".gitignore"], check=True)
    studies = tmp_path / "studies"
    studies.mkdir()
    # Act / Assert: the tracked file, then with the new one (never the ignored one)
    extra = len("ignored.bin\n")
    assert checkout_bytes(studies, untracked=False) == 2**20 + extra
    assert checkout_bytes(studies) == 3 * 2**20 + extra
    assert (
        size.checkout_line(studies)
        == f"the checkout holds 3.0 MiB (tracked and new files) of the {LIMIT_MIB:g} MiB it may"
    )
    monkeypatch.setattr(size, "CHECKOUT_LIMIT_MIB", 2.5)
    line = size.checkout_line(studies)
    assert (
        line is not None
        and line.startswith("the checkout holds 3.0 MiB")
        and ": over, so the tests fail" in line
    )
    outside = tmp_path.parent / f"{tmp_path.name}_plain"
    outside.mkdir()
    assert checkout_bytes(outside) is None and size.checkout_line(outside) is None  # not a checkout
