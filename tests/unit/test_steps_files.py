"""The studies' steps files (long background studies, one command a line) still fit today's CLI: every line
parses, every ``fedaug run`` line builds its configs, and every run dir an attack names (a target, a
``--checkpoint``) is one that a run line of the same file makes. Parsing only: nothing trains."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from fedaug.cli import build_parser
from fedaug.cli_common import load_config
from fedaug.experiments.runner import comparison_configs
from fedaug.reproducibility.identity import run_dir_for
from tests.conftest import REPO_ROOT

STEPS = [
    "studies/privacy/multiseed/steps.txt",
    "studies/privacy_har/steps.txt",
    "studies/fedaugmix/severity/steps.txt",
]
RUN_DIR = re.compile(r"(?<![\w/.])runs/[^\s@\"]+")


def commands(path: Path) -> list[list[str]]:
    lines = [x for x in path.read_text().splitlines() if x.strip() and not x.startswith("#")]
    return [shlex.split(x) for x in lines]


@pytest.mark.parametrize("steps", STEPS)
def test_every_line_parses_and_every_attacked_run_dir_is_made_by_a_run_line(steps: str) -> None:
    parser = build_parser()
    made: set[str] = set()
    named: list[tuple[str, str]] = []
    for words in commands(REPO_ROOT / steps):
        assert words[0] == "fedaug", words
        args = parser.parse_args(words[1:])
        if args.command == "run":
            made |= {str(run_dir_for(sub)) for sub in comparison_configs(load_config(args))}
        else:
            assert args.command == "attack", words
            named += [
                (m.removesuffix("/ckpt/latest.pt"), words[2]) for w in words for m in RUN_DIR.findall(w)
            ]
    assert made and named
    missing = sorted({f"{attack}: {path}" for path, attack in named if path not in made})
    assert not missing, f"{steps}: attacks name run dirs no run line makes: {missing[:5]}"
