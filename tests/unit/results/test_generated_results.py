"""README.md's results section and docs/results.md hold exactly what ``tools/results/__main__.py`` generates
from the
archived runs: a number typed by hand, or an archive changed without regenerating, fails here by its cell."""

from __future__ import annotations

import importlib
import logging
from types import ModuleType

import pytest
from tools.results.fragments import fragment_differences, read_fragments

from tests.conftest import REPO_ROOT


def _generator() -> ModuleType:
    """``tools/results/__main__.py`` (the package ``tools.results`` since the layout move)."""
    return importlib.import_module("tools.results.__main__")


@pytest.fixture(scope="module")
def generated() -> tuple[ModuleType, dict[str, str]]:
    logging.getLogger("fedaug.results.store").setLevel(logging.ERROR)
    module = _generator()
    return module, module.generate()


def test_every_marked_block_equals_what_the_archives_give(
    generated: tuple[ModuleType, dict[str, str]],
) -> None:
    """Run ``python tools/results/__main__.py`` to rewrite the blocks this names."""
    module, fragments = generated
    found: list[str] = []
    names: set[str] = set()
    for document in module.DOCUMENTS:
        written = read_fragments((REPO_ROOT / document).read_text())
        names |= set(written)
        for name, body in written.items():
            found += fragment_differences(f"{document} {name}", body, fragments[name])
    assert found == [], "\n".join(found[:30])
    assert names == set(fragments)  # every generated block is shown somewhere, and nothing else is marked


def test_the_headline_states_its_statistic_in_every_row(generated: tuple[ModuleType, dict[str, str]]) -> None:
    _, fragments = generated
    rows = fragments["headline"].splitlines()[2:]
    assert len(rows) >= 7
    for row in rows:
        statistic = row.split("|")[2]
        assert any(word in statistic for word in ("best", "last-10", "final")), row
        assert "seed" in statistic, row


def test_every_document_with_a_marked_block_is_checked(generated: tuple[ModuleType, dict[str, str]]) -> None:
    """A study README given a ``<!-- results:NAME -->`` block must be listed in
    ``tools/results/__main__.py``'s
    DOCUMENTS, or neither ``--check`` nor this test would see it go stale."""
    module, _ = generated
    marked = {
        str(path.relative_to(REPO_ROOT))
        for pattern in ("*.md", "docs/**/*.md", "studies/*/README.md")
        for path in REPO_ROOT.glob(pattern)
        if read_fragments(path.read_text())
    }
    assert marked <= set(module.DOCUMENTS), sorted(marked - set(module.DOCUMENTS))
    assert len(module.DOCUMENTS) >= 15
