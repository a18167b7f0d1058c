"""The studies' steps files (long background studies, one command a line) still fit today's CLI: every line
parses, every ``fedaug run`` line builds its configs, and every run dir an attack names (a target, a
``--checkpoint``) is one that a run line of the same file makes. Parsing only: nothing trains."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path
from types import ModuleType

import pytest

from fedaug.cli.common import load_config
from fedaug.cli.main import build_parser
from fedaug.config.identity import run_dir_for
from fedaug.runs.runner import comparison_configs
from tests.conftest import REPO_ROOT

STEPS = [
    "studies/privacy/multiseed/steps.txt",
    "studies/privacy_har/steps.txt",
    "studies/fedaugmix/severity/steps.txt",
    "studies/privacy_dp/steps.txt",
    "studies/privacy_dp/steps_tiny.txt",
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
            read = [w for i, w in enumerate(words) if words[i - 1] != "--out"]  # where it writes: not a run
            named += [(m.removesuffix("/ckpt/latest.pt"), words[2]) for w in read for m in RUN_DIR.findall(w)]
    assert made and named
    missing = sorted({f"{attack}: {path}" for path, attack in named if path not in made})
    assert not missing, f"{steps}: attacks name run dirs no run line makes: {missing[:5]}"


def check_steps() -> ModuleType:
    """``studies/privacy/multiseed/check_steps.py`` (a script) loaded as a module."""
    spec = importlib.util.spec_from_file_location(
        "check_steps", REPO_ROOT / "studies" / "privacy" / "multiseed" / "check_steps.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_smoke_check_shortens_runs_and_attacks_into_its_folder(tmp_path: Path) -> None:
    shorten = check_steps().shorten
    run = "fedaug run configs/privacy_har.yaml --method flea --seed 0 --set name=privacy_har_decor0"
    assert shorten(run, tmp_path, 2, 0) == [
        *shlex.split(run),
        *(
            "--out-dir",
            str(tmp_path / "runs"),
            "--set",
            "train.rounds=2",
            "--set",
            "engine.keep_checkpoints=[1, 2]",
        ),
    ]
    smoke = "fedaug run configs/privacy_fmnist.yaml --method fedmix --smoke --seed 1"
    assert shorten(smoke, tmp_path, 1, 0)[-4:] == [
        "--out-dir",
        str(tmp_path / "runs"),
        "--set",
        "engine.keep_checkpoints=[1]",
    ]
    attack = (
        'fedaug attack context "f r10=runs/p/x/flea/seed0@10" "FedMix=runs/p-smoke/x/fedmix/seed0" '
        "--out studies/a --sizes 100,300 --repeats 3 --seed 0"
    )
    assert shorten(attack, tmp_path, 1, 7) == [
        "fedaug", "attack", "context",
        f"f r10={tmp_path}/runs/p/train.rounds=1/x/flea/seed0@1",
        f"FedMix={tmp_path}/runs/p-smoke/x/fedmix/seed0",
        "--out", str(tmp_path / "out" / "7"), "--sizes", "50,100", "--repeats", "1", "--seed", "0",
    ]  # fmt: skip
    invert = "fedaug attack invert --checkpoint runs/a/x/fedavg/seed2/ckpt/latest.pt --iterations 1000"
    assert shorten(invert, tmp_path, 1, 0)[3:] == [
        "--checkpoint", f"{tmp_path}/runs/a/train.rounds=1/x/fedavg/seed2/ckpt/latest.pt",
        "--iterations", "1",
    ]  # fmt: skip
