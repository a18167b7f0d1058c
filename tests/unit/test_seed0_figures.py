"""The privacy studies keep seed 0's figures only (``scripts/seed0_figures.py`` and ``.gitignore``), and no
committed Markdown page under ``studies/`` or ``docs/`` links an image that is not committed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "scripts"))
try:
    import seed0_figures
finally:
    sys.path.remove(str(REPO_ROOT / "scripts"))

needs_git = pytest.mark.skipif(
    shutil.which("git") is None or not (REPO_ROOT / ".git").exists(), reason="needs a git checkout"
)
REPORT = (
    "# Context\n\n| a | b |\n|---|---|\n\n![context_accuracy](context_accuracy.png)\n![x](x.png)\n"
    "text ![y](y.png)\n"
)


def test_only_image_lines_of_dropped_files_become_notes() -> None:
    text = seed0_figures.rewrite(REPORT, lambda name: name != "x.png")
    assert "](context_accuracy.png)" not in text and "![x](x.png)\n" in text
    assert "`context_accuracy.png`: not committed" in text
    assert "text ![y](y.png)" in text  # only whole image lines are the figures a report links
    assert text.startswith("# Context\n\n| a | b |\n|---|---|\n\n") and text.endswith("\n")
    assert seed0_figures.rewrite(text, lambda name: True) == seed0_figures.rewrite(REPORT, lambda name: True)


@needs_git
def test_later_seeds_pages_lose_their_ignored_figures_and_seed_0_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # inside the checkout, where its .gitignore applies: attacks/<group>/seed<N>/... as the study writes them
    root = REPO_ROOT / "studies" / "privacy" / "multiseed" / "attacks" / f"test-{tmp_path.name}"
    try:
        for seed in (0, 1):
            (root / f"seed{seed}" / "context").mkdir(parents=True)
            (root / f"seed{seed}" / "context" / "context.md").write_text(REPORT)
        monkeypatch.chdir(REPO_ROOT)
        assert seed0_figures.main([str(root.relative_to(REPO_ROOT))]) == 0
        assert (root / "seed0/context/context.md").read_text() == REPORT
        later = (root / "seed1/context/context.md").read_text()
        assert "`context_accuracy.png`: not committed" in later and "](x.png)" not in later
        assert seed0_figures.main([str(root.relative_to(REPO_ROOT))]) == 0
        assert (root / "seed1/context/context.md").read_text() == later  # twice changes nothing
    finally:
        shutil.rmtree(root, ignore_errors=True)


@needs_git
@pytest.mark.parametrize(
    ("path", "ignored"),
    [
        ("studies/privacy/multiseed/attacks/flea/seed1/context/context_accuracy.png", True),
        ("studies/privacy/multiseed/attacks/flea/seed0/context/context_accuracy.png", False),
        ("studies/privacy_har/attacks/seed2/reconstruct/reconstruct_examples.png", True),
        ("studies/privacy_har/attacks/seed0/reconstruct/reconstruct_examples.png", False),
        ("studies/privacy_har/attacks/seed1/reconstruct/reconstruct.json", False),
        ("studies/fedaugmix/severity/invert/seed1/grid_converged_0-1-3-6-10.png", True),
        ("studies/fedaugmix/severity/invert/seed0/grid_converged_0-1-3-6-10.png", False),
    ],
)
def test_gitignore_leaves_out_later_seeds_figures_only(path: str, ignored: bool) -> None:
    done = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO_ROOT, check=False)
    assert (done.returncode == 0) is ignored


@needs_git
def test_every_committed_page_links_committed_images() -> None:
    tracked = set(
        subprocess.run(
            ["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.splitlines()
    )
    missing = []
    for page in sorted(p for p in tracked if p.endswith(".md") and p.startswith(("studies/", "docs/"))):
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+\.png)\)", (REPO_ROOT / page).read_text()):
            if target.startswith(("http://", "https://")):
                continue
            resolved = (REPO_ROOT / page).parent.joinpath(target).resolve()
            if not resolved.is_relative_to(REPO_ROOT) or str(resolved.relative_to(REPO_ROOT)) not in tracked:
                missing.append(f"{page} -> {target}")
    assert not missing, "image links to files that are not committed: " + "; ".join(missing[:20])
