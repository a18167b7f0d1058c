"""How much of the repository a lent GPU machine can take: the limit on the checkout's files and their sum.

A lent machine takes the working tree (tracked files and untracked files git does not ignore) and the data
a grid carries, 64 MiB in all (:data:`tools.campaign.run.MACHINE_LIMIT_MIB`). The checkout itself is held
under :data:`CHECKOUT_LIMIT_MIB` (``tests/unit/test_repository_size.py`` for the tracked files), and
``fedaug campaign import`` says how much of it the checkout holds once the imported runs are in, before
they are committed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

CHECKOUT_LIMIT_MIB = 38.0
"""The device tool's 64 MiB, less 26 MiB: the largest data a grid carries (the CIFAR-10 JPEG copy, 18.5 MiB)
and 7.5 MiB for a session's untracked files. The campaign checks the real sum before it starts a lent
machine (:func:`tools.campaign.run.data_step`); this limit keeps the checkout from eating that room
unnoticed."""


def checkout_bytes(root: Path, *, untracked: bool = True) -> int | None:
    """Bytes of the files of the git checkout that holds ``root``: the tracked ones, and with ``untracked``
    those git does not ignore (what a commit of ``studies/`` would add); None: not a git checkout."""
    args = ["ls-files", "-z", "--cached", *(["--others", "--exclude-standard"] if untracked else [])]
    try:
        top = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--show-toplevel"],
            capture_output=True,
            check=True,
            text=True,
        ).stdout.strip()
        listed = subprocess.run(["git", "-C", top, *args], capture_output=True, check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return None
    files = (Path(top) / name for name in listed.split("\0") if name)
    return sum(path.stat().st_size for path in files if path.is_file())


def checkout_line(root: Path) -> str | None:
    """``the checkout holds 35.9 MiB of the 38 MiB it may ...`` (None: not a git checkout)."""
    found = checkout_bytes(root)
    if found is None:
        return None
    mib = found / 2**20
    line = (
        f"the checkout holds {mib:.1f} MiB (tracked and new files) of the {CHECKOUT_LIMIT_MIB:g} MiB it may"
    )
    if mib > CHECKOUT_LIMIT_MIB:
        line += (
            ": over, so the tests fail and a lent machine may refuse the tree; shrink before committing "
            "(python scripts/shrink_pngs.py, python scripts/compact_archives.py, fewer figures)"
        )
    return line
