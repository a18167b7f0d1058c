"""Rewrites the attack reports' Markdown so that no page links a figure the repository does not commit.

The attack commands write figures beside each report (``reconstruct_examples.png``,
``reconstruct_training.png``, ``context_*.png``, ``grid_*.png``) and link them from the report's Markdown.
To keep the tracked tree small (issue #51), the privacy studies commit seed 0's example figures only:
``.gitignore`` leaves out the PNGs of ``seed1``, ``seed2``, ... and, on Fashion-MNIST, the training curves.
Their numbers stay complete in the JSON and Markdown. This script replaces each image line whose file git
leaves out with a line that says so, and leaves every other line alone. Running it twice changes nothing.
The studies' ``finish.sh`` scripts call it.

    python scripts/seed0_figures.py studies/privacy_har/attacks studies/fedaugmix/severity/invert
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

IMAGE = re.compile(r"^!\[[^\]]*\]\(([^)/]+\.png)\)\s*$")


def ignored_by_git(paths: Iterable[Path]) -> set[Path]:
    """The paths among ``paths`` that git's ignore rules leave out (none outside a git checkout)."""
    paths = list(paths)
    if not paths:
        return set()
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        input="\n".join(str(p) for p in paths),
        capture_output=True,
        text=True,
        check=False,
    )
    return {Path(line) for line in done.stdout.splitlines()} if done.returncode in (0, 1) else set()


def rewrite(text: str, dropped: Callable[[str], bool]) -> str:
    """``text`` with each image line ``![x](file.png)`` whose file is ``dropped`` replaced by a note."""
    lines = []
    for line in text.splitlines():
        match = IMAGE.match(line)
        lines.append(
            f"`{match.group(1)}`: not committed (the study keeps seed 0's example figures only; see its "
            "`.gitignore`); the numbers here are complete."
            if match and dropped(match.group(1))
            else line
        )
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def main(roots: list[str]) -> int:
    pages = sorted(page for root in roots for page in Path(root).rglob("*.md"))
    links = {
        page.parent / m.group(1)
        for page in pages
        for m in map(IMAGE.match, page.read_text().splitlines())
        if m is not None
    }
    left_out = ignored_by_git(links)
    changed = 0
    for page in pages:
        text = page.read_text()
        folder = page.parent
        new = rewrite(text, lambda name: folder / name in left_out)  # noqa: B023 (used at once, in this loop)
        if new != text:
            page.write_text(new)
            changed += 1
    print(f"rewrote {changed} of {len(pages)} pages ({len(left_out)} linked figures not committed)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
