"""A finished 3-round smoke run made once per test session, and copies of it cut back to an earlier round
(as a kill leaves them), for the run-dir verification and fuzz tests."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from fedaug.config.identity import run_dir_for
from fedaug.config.load import load_run_config
from fedaug.config.schema import ExperimentConfig
from fedaug.runs.runner import run_experiment

__all__ = ["run_dir_for"]
from tests.conftest import REPO_ROOT

SMOKE = str(REPO_ROOT / "configs" / "smoke.yaml")
SETS = ("engine.keep_checkpoints=[1, 2]", "engine.num_threads=1", "engine.progress=false")
"""Kept checkpoints of rounds 1 and 2 (neutral keys): a copy can be put back to either round."""

_FINISHED: dict[Path, Path] = {}


def config(out: Path) -> ExperimentConfig:
    """The smoke run's config with its run dirs under ``out``."""
    return load_run_config([SMOKE], [*SETS, f"out_dir={out}"])


def argv(out: Path, *extra: str) -> list[str]:
    """``fedaug run`` of the same run under ``out``."""
    sets = [item for value in SETS for item in ("--set", value)]
    return ["run", SMOKE, "--out-dir", str(out), *sets, *extra]


def finished(root: Path) -> Path:
    """The run dir of a finished smoke run under ``root`` (made on the first call of a session)."""
    if root not in _FINISHED:
        logging.getLogger("fedaug").setLevel(logging.WARNING)
        run_experiment(config(root / "runs"))
        _FINISHED[root] = run_dir_for(config(root / "runs"))
    return _FINISHED[root]


def copy_run(source: Path, out: Path, *, after_round: int | None = None) -> Path:
    """A copy of the finished run ``source`` as the run of :func:`config` under ``out``; with
    ``after_round``, as a kill right after that round's checkpoint leaves it (no summary)."""
    target = run_dir_for(config(out))
    shutil.copytree(source, target)
    lines = (target / "config.yaml").read_text().splitlines(keepends=True)  # out_dir: a neutral key
    moved = [f"out_dir: {out}\n" if line.startswith("out_dir:") else line for line in lines]
    (target / "config.yaml").write_text("".join(moved))
    if after_round is not None:
        shutil.copyfile(target / "ckpt" / f"round_{after_round:04d}.pt", target / "ckpt" / "latest.pt")
        for name in ("metrics.jsonl", "timings.jsonl"):
            lines = (target / name).read_text().splitlines(keepends=True)
            (target / name).write_text("".join(lines[:after_round]))
        (target / "summary.json").unlink()
    return target


def results(run_dir: Path) -> tuple[bytes, dict[str, object]]:
    """What must equal an uninterrupted run's: ``metrics.jsonl`` and ``summary.json``."""
    return (run_dir / "metrics.jsonl").read_bytes(), json.loads((run_dir / "summary.json").read_text())


def result_values(run_dir: Path) -> tuple[list[object], dict[str, object]]:
    """:func:`results` as values: the metrics lines parsed. A damage that leaves every value as it was (a 17th
    significant digit edited to another spelling of the same float) changes no result, and the verifier,
    which checks values, rightly lets it pass."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines], json.loads((run_dir / "summary.json").read_text())
