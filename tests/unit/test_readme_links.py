"""The README and docs/ point at things that exist: relative links (and their anchors), the configs/ paths
the README names, and every ``fedaug`` subcommand they show."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from fedaug.cli.main import build_parser
from tests.conftest import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = sorted((REPO_ROOT / "docs").rglob("*.md"))
PAGES = [README, *DOCS]

FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.MULTILINE)
HTML_ID = re.compile(r"<a\s+id=\"([^\"]+)\"")
CONFIG_PATH = re.compile(r"configs/[\w./-]+\.ya?ml")
COMMAND = re.compile(r"(?:^|[\s(&;|])fedaug[ \t]+([a-z][a-z_-]*)(?:[ \t]+([a-z][a-z_-]*))?", re.MULTILINE)


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT))


def _prose(text: str) -> str:
    """The text without code blocks and inline code (links there are not links)."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def _code(text: str) -> str:
    """The code blocks and inline code spans of the text, one per line."""
    spans = [span.strip("`") for span in INLINE_CODE.findall(FENCE.sub("", text))]
    return "\n".join([m.group(0) for m in FENCE.finditer(text)] + spans)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    found: set[str] = set(HTML_ID.findall(text))
    seen: dict[str, int] = {}
    for heading in HEADING.findall(text):
        slug = github_slug(heading)
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def _links(page: Path) -> list[str]:
    targets = LINK.findall(_prose(page.read_text(encoding="utf-8")))
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]  # http:, https:, mailto:


def test_the_pages_exist() -> None:
    assert README.is_file()
    assert {_rel(p) for p in DOCS} >= {
        "docs/README.md",
        "docs/results.md",
        "docs/methods/flea.md",
        "docs/methods/baselines.md",
        "docs/methods/fedaugmix.md",
        "docs/methods/fedzda.md",
        "docs/guide/configs-and-overrides.md",
        "docs/guide/datasets-and-partitions.md",
        "docs/guide/run-dirs-and-resume.md",
        "docs/guide/sweeps-and-reports.md",
        "docs/guide/gpu.md",
        "docs/guide/flower.md",
        "docs/guide/privacy-attacks.md",
        "docs/guide/speed.md",
    }


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in _links(page):
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{target} (no {resolved})")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target} (no heading #{anchor} in {_rel(resolved)})")
        elif REPO_ROOT not in (resolved, *resolved.parents):
            broken.append(f"{target} (outside the repository)")
    assert not broken, f"{_rel(page)}: broken links: {broken}"


def test_readme_config_paths_exist() -> None:
    named = set(CONFIG_PATH.findall(README.read_text(encoding="utf-8")))
    assert named, "the README names no configs/ path: the pattern is wrong"
    missing = sorted(p for p in named if not (REPO_ROOT / p).is_file())
    assert not missing, f"README names configs that do not exist: {missing}"


def _commands() -> dict[str, set[str]]:
    """fedaug's subcommands, each with its own subcommands (empty when it has none)."""

    def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        return {}

    return {name: set(subcommands(sub)) for name, sub in subcommands(build_parser()).items()}


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_named_subcommands_exist(page: Path) -> None:
    commands = _commands()
    assert {"run", "sweep", "report"} <= set(commands)
    unknown = []
    for first, second in COMMAND.findall(_code(page.read_text(encoding="utf-8"))):
        if first not in commands:
            unknown.append(f"fedaug {first}")
        elif commands[first] and second and second not in commands[first]:
            unknown.append(f"fedaug {first} {second}")
    assert not unknown, f"{_rel(page)} names subcommands the parser lacks: {sorted(set(unknown))}"


def test_readme_keeps_the_two_setup_commands() -> None:
    first_block = FENCE.search(README.read_text(encoding="utf-8"))
    assert first_block is not None
    lines = first_block.group(0).splitlines()[1:3]
    assert lines == [
        "pip install torch==2.13.0 && pip install -e '.[plots]' && fedaug run",
        "pip install torch==2.13.0 && pip install -e '.[test]' && python -m pytest -q",
    ]


def test_the_cpu_only_route_is_the_one_ci_takes_and_its_pin_is_the_readmes() -> None:
    # the README's pin resolves to the CUDA build from the public index on Linux (issue 69): the CPU route
    # the README and the GPU guide give is the one .ci/run installs torch by, with the same pin
    route = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    readme = README.read_text(encoding="utf-8")
    assert route in readme and route in (REPO_ROOT / "docs" / "guide" / "gpu.md").read_text(encoding="utf-8")
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f"python -m {route.replace('install', 'install --quiet', 1)}\n" in ci
    assert re.search(r"pip install --quiet -e '\.\[test,", ci) and "\npython -m pytest -q\n" in ci


def test_the_checks_catch_what_they_should(tmp_path: Path) -> None:
    assert github_slug("Starting from FedAvg's checkpoint") == "starting-from-fedavgs-checkpoint"
    assert github_slug("Fairness metrics (any method)") == "fairness-metrics-any-method"
    assert github_slug("FedAvg (`fedavg`)") == "fedavg-fedavg"
    page = tmp_path / "page.md"
    page.write_text(
        "[a](x.md) `[b](y.md)` `fedaug tiny` [c](https://example.org)\n```\n[d](z.md)\nfedaug nope\n```\n"
    )
    assert _links(page) == ["x.md"]
    assert sorted(COMMAND.findall(_code(page.read_text()))) == [("nope", ""), ("tiny", "")]
