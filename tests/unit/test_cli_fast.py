"""The CLI answers without importing torch: ``--help``, ``--version``, ``list``, argument errors (issue 57).

Each case runs the CLI in a fresh interpreter whose import system refuses ``torch``: a module that imports it
at the CLI's import time, or a command that needs it for what it prints, fails there.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from fedaug.cli import main
from fedaug.cli_common import OneLineParser
from tests.conftest import REPO_ROOT

BLOCKED = """
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"{name} is blocked in this test")
        return None

sys.meta_path.insert(0, NoTorch())
from fedaug.cli import main
code = main(sys.argv[1:])
assert "torch" not in sys.modules
sys.exit(code)
"""


def _blocked(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-c", BLOCKED, *argv], capture_output=True, text=True, env=env, timeout=60
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--help"], "fedaug COMMAND --help"),
        (["--version"], "fedaug "),
        (["list"], "methods: ccvr, fedaugmix"),
        (["list", "methods"], "flea_official"),
        (["list", "datasets"], "uci_har"),
        (["list", "models"], "harnet"),
        (["run", "--help"], "--fresh"),
        (["sweep", "--help"], "--dry-run"),
        (["zsdg", "--help"], "--per-class"),
        (["flower", "--help"], "simulate"),
    ],
)
def test_help_version_and_list_answer_with_torch_blocked(argv: list[str], expected: str) -> None:
    result = _blocked(argv)
    assert result.returncode == 0, result.stderr
    assert expected in result.stdout


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", "--bogus"], "unrecognized arguments: --bogus"),
        (["list", "bogus"], "invalid choice: 'bogus'"),
        (["nope"], "invalid choice: 'nope'"),
    ],
)
def test_argument_errors_answer_with_torch_blocked(argv: list[str], expected: str) -> None:
    result = _blocked(argv)
    assert result.returncode == 2
    assert expected in result.stderr and len(result.stderr.splitlines()) == 1
    assert result.stdout == ""


def test_the_attack_sub_commands_are_added_when_attack_is_parsed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["attack", "context", "--help"])
    assert exit_.value.code == 0
    assert "--sizes" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["attack"])
    assert exit_.value.code == 2
    assert "ATTACK" in capsys.readouterr().err


def test_populate_runs_once_at_the_first_parse_not_at_build() -> None:
    calls: list[str] = []

    def populate(parser: argparse.ArgumentParser) -> None:
        calls.append("populated")
        parser.add_argument("--size", type=int)

    parser = OneLineParser(prog="p")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("lazy", populate=populate)
    assert calls == []
    assert parser.parse_args(["lazy", "--size", "3"]).size == 3
    assert parser.parse_args(["lazy"]).size is None
    assert calls == ["populated"]
