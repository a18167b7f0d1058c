"""The CLI answers without importing torch: ``--help``, ``--version``, ``list``, argument errors (issue 57), a
config file that cannot be read, a ``--set`` that cannot be parsed or names an unknown key or a bad value, and
bad sweep flags (issue 69).

The cases run the CLI in one fresh interpreter whose import system refuses ``torch``: a module that imports it
at the CLI's import time, or a command that needs it for what it prints, fails there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from fedaug.cli.common import OneLineParser
from fedaug.cli.main import main
from tests.conftest import REPO_ROOT

BLOCKED = """
import contextlib, io, json, sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"{name} is blocked in this test")
        return None

sys.meta_path.insert(0, NoTorch())
from fedaug.cli.main import main
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code
    results.append([code, out.getvalue(), err.getvalue(), "torch" in sys.modules])
print(json.dumps(results))
"""

ANSWERS = [
    (["--help"], "fedaug COMMAND --help"),
    (["--version"], "fedaug "),
    (["list"], "methods: ccvr, centralized, fedadagrad, fedadam"),
    (["list", "methods"], "flea_official"),
    (["list", "datasets"], "uci_har"),
    (["list", "models"], "harnet"),
    (["run", "--help"], "--fresh"),
    (["sweep", "--help"], "--dry-run"),
    (["zsdg", "--help"], "--per-class"),
    (["flower", "--help"], "simulate"),
]
ERRORS = [
    (["run", "--bogus"], "unrecognized arguments: --bogus"),
    (["list", "bogus"], "invalid choice: 'bogus'"),
    (["nope"], "invalid choice: 'nope'"),
    # config and sweep-flag errors: refused before the command imports torch (issue 69)
    (["run", "smoke", "--set", "train.rounds"], "override 'train.rounds' must look like key.path=value"),
    (["run", "smoke", "--set", "=3"], "override '=3' has an empty key"),
    (["run", "no_such_config.yaml"], "config file 'no_such_config.yaml' does not exist"),
    (["sweep", "smoke", "--shard", "2/2"], "--shard must be i/n with 0 <= i < n"),
    (["sweep", "smoke", "--workers", "0"], "--workers must be in 1..1024, got 0"),
    (["sweep", "smoke", "--workers", "2", "--heartbeat", "-1"], "--heartbeat must be a finite number >= 0"),
    (["sweep", "no_such_sweep.yaml"], "config file 'no_such_sweep.yaml' does not exist"),
    (["sweep", "smoke", "--set", "seed"], "override 'seed' must look like key.path=value"),
    (["flower", "simulate", "smoke", "--set", "seed"], "override 'seed' must look like key.path=value"),
    # an unknown key, a wrong type or a value out of range: the whole config is built before torch
    (["run", "--set", "train.nope=1"], "unknown config key 'train.nope'; valid keys: batch_size,"),
    (["run", "smoke", "--set", "train.rounds=abc"], "train.rounds must be of type int, got 'abc' (str)"),
    (["run", "smoke", "--set", "engine.precision=fp16"], "engine.precision must be one of float32, bf16"),
    (["run", "smoke", "--set", "train.optimizer=rmsprop"], "train.optimizer must be one of adam, sgd"),
    (["run", "smoke", "--smoke", "--set", "train.lr=1e39"], "train.lr must be finite in float32"),
    (["flower", "simulate", "smoke", "--set", "train.lr=-1"], "train.lr must be a finite number > 0"),
    (["sweep", "flea_table1_har", "--set", "train.rounds=abc"], "train.rounds must be of type int"),
    (["sweep", "smoke", "--dry-run", "--set", "engine.nope=1"], "unknown config key 'engine.nope'"),
    # a name no built-in registers (no plugins): refused from the registrations as written
    (["run", "--method", "fedavg,nosuch"], "unknown method 'nosuch'; valid choices: ccvr, centralized,"),
    (["run", "smoke", "--set", "data=nosuch"], "unknown dataset 'nosuch'; valid choices: arrays, cifar10,"),
    (["run", "smoke", "--set", "model=nosuch"], "unknown model 'nosuch'; valid choices: audionet,"),
    (["flower", "simulate", "smoke", "--set", "partition=x"], "unknown partitioner 'x'; valid choices: dir"),
]


@pytest.fixture(scope="module")
def blocked() -> dict[str, tuple[int, str, str, bool]]:
    """Every case's exit code, stdout, stderr and whether torch got imported, all in one interpreter that
    refuses ``torch`` (a command that imports it fails, and so does every later one)."""
    cases = [argv for argv, _ in [*ANSWERS, *ERRORS]]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED, json.dumps(cases)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    return {
        " ".join(argv): tuple(result) for argv, result in zip(cases, json.loads(done.stdout), strict=True)
    }


@pytest.mark.parametrize(("argv", "expected"), ANSWERS)
def test_help_version_and_list_answer_with_torch_blocked(
    blocked: dict[str, tuple[int, str, str, bool]], argv: list[str], expected: str
) -> None:
    code, out, err, torch_imported = blocked[" ".join(argv)]
    assert code == 0, err
    assert expected in out
    assert not torch_imported


@pytest.mark.parametrize(("argv", "expected"), ERRORS)
def test_argument_errors_answer_with_torch_blocked(
    blocked: dict[str, tuple[int, str, str, bool]], argv: list[str], expected: str
) -> None:
    code, out, err, torch_imported = blocked[" ".join(argv)]
    assert code == 2
    assert expected in err and len(err.splitlines()) == 1
    assert out == ""
    assert not torch_imported


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
