"""Limits before work (fedaug.config.limits, fedaug.config.yamlio, the CLI): each failure class of issue 53
that was
accepted silently, ended in a traceback, hung or left files behind is one line, exit 2, nothing written."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fedaug.cli.main import main
from fedaug.config import limits
from fedaug.engine import checkpoint
from fedaug.errors import PathError
from fedaug.runs.lock import check_unlocked
from fedaug.runtime.machine import default_threads, use_threads
from tests.conftest import REPO_ROOT
from tests.unit import run_dirs

SMOKE = str(REPO_ROOT / "configs" / "smoke.yaml")
BIG = "9" * 100_000


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


CASES = [
    # (id, extra argv after `run SMOKE --out-dir OUT`, text the one error line must contain)
    ("empty-out-dir", ["--out-dir", ""], "out_dir must be a folder path, got ''"),
    ("empty-data-dir", ["--data-dir", ""], "data.data_dir must be a non-empty name, got ''"),
    ("empty-device", ["--device", ""], "engine.device='' is not a device"),
    ("empty-method", ["--method", ""], "--method must name methods, comma-separated, got ''"),
    ("empty-method-item", ["--method", "fedavg,,flea"], "--method must name methods"),
    ("duplicate-method", ["--method", "fedavg,fedavg"], "compare lists fedavg more than once"),
    ("duplicate-compare", ["--set", "compare=[fedavg, fedavg]"], "compare lists fedavg more than once"),
    ("empty-segment", ["--set", "train..lr=0.1"], "override 'train..lr=0.1' has an empty segment"),
    ("leading-dot", ["--set", ".train.lr=0.1"], "has an empty segment in its key '.train.lr'"),
    ("seed-beyond-64-bits", ["--seed", "18446744073709551616"], "seed must be in 0..9223372036854775807"),
    ("partition-seed-big", ["--set", "partition.seed=9223372036854775808"], "partition.seed must be in"),
    ("lr-beyond-float32", ["--set", "train.lr=1e39"], "train.lr must be finite in float32"),
    ("lr-zero-in-float32", ["--set", "train.lr=1e-50"], "train.lr must be a number that is not 0 in float32"),
    ("wd-beyond-float32", ["--set", "train.weight_decay=1e300"], "train.weight_decay must be finite"),
    ("keep-beyond-rounds", ["--set", "engine.keep_checkpoints=[5]"], "keep_checkpoints must list distinct"),
    (
        "keep-repeated",
        ["--set", "engine.keep_checkpoints=[1, 1]"],
        "rounds in 1..3 (train.rounds), got [1, 1]",
    ),
    ("name-control", ["--set", 'name="a\\x01b"'], "name must be free of control characters"),
    ("name-escape", ["--set", 'name="a\\x1b[31m"'], "name must be free of control characters"),
    ("method-path", ["--set", "method.name=a/b"], "method.name must be a name without path characters"),
    ("dataset-empty", ["--set", "data.name=''"], "data.name must be a non-empty name"),
    ("name-too-long", ["--set", "name=" + "x" * 300], "is 300 bytes long, more than the 255"),
    ("method-too-long", ["--set", "method=" + "y" * 5000], "(4922 more characters) is 5000 bytes long"),
    ("huge-integer", ["--set", f"train.lr={BIG}"], "Exceeds the limit (4300 digits)"),
    ("huge-string-echo", ["--set", f"train.optimizer={'z' * 1_000_000}"], "(999922 more characters)"),
    ("alloc", ["--set", "model.hidden_sizes=[100000000000000]"], "cannot allocate the memory this config"),
    # found by tests/unit/test_fuzz_config.py (-m slow): list items were not checked against their type
    ("compare-null-item", ["--set", "compare=[null]"], "compare[0] must be of type str, got None"),
    ("keep-bool-item", ["--set", "engine.keep_checkpoints=[true]"], "keep_checkpoints[0] must be of type"),
]


@pytest.mark.parametrize(("extra", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_value_out_of_its_limit_is_one_line_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], expected: str
) -> None:
    code = main(["run", SMOKE, "--out-dir", str(tmp_path / "runs"), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert expected in err[0], err[0]
    assert len(err[0]) < 1000
    assert files_under(tmp_path) == []


FILES = [
    ("empty", lambda d: (d / "c.yaml").write_text(""), "c.yaml is empty (or only comments)"),
    ("comments", lambda d: (d / "c.yaml").write_text("# nothing\n\n"), "c.yaml is empty (or only comments)"),
    ("fifo", lambda d: os.mkfifo(d / "c.yaml"), "c.yaml is not a regular file (a pipe, socket or device)"),
    ("too-large", lambda d: (d / "c.yaml").write_text("#" * (1 << 20) + "\n"), "c.yaml is larger than 1 MiB"),
    (
        "alias-bomb",
        lambda d: (d / "c.yaml").write_text(
            "a: &a [x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(12)
            )
        ),
        "more than 100 aliases (an alias bomb?)",
    ),
]


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in FILES], ids=[c[0] for c in FILES])
def test_a_config_file_that_is_not_a_config_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, expected: str
) -> None:
    make(tmp_path)  # type: ignore[operator]
    start = time.perf_counter()
    code = main(["run", str(tmp_path / "c.yaml"), "--out-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and expected in err[0], err
    assert time.perf_counter() - start < 5
    assert not (tmp_path / "runs").exists()


def test_dev_zero_as_a_config_is_refused_at_once(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["run", "/dev/zero", "--out-dir", str(tmp_path)]) == 2
    assert "/dev/zero is not a regular file" in capsys.readouterr().err


def test_a_full_disk_is_one_line_with_no_temporary_file_and_the_lock_released(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoint.torch, "save", full)
    code = main(run_dirs.argv(tmp_path))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "latest.pt: No space left on device" in err[0]
    run_dir = run_dirs.run_dir_for(run_dirs.config(tmp_path))
    assert not list(run_dir.rglob("*.tmp"))
    check_unlocked(run_dir)  # raises if the lock were still held


def test_atomic_write_removes_its_temporary_file_on_any_failure(tmp_path: Path) -> None:
    def interrupted(handle: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        checkpoint.atomic_write(tmp_path / "x.json", interrupted)
    with pytest.raises(PathError, match="x" * 300):
        checkpoint.atomic_write(tmp_path / ("x" * 300), lambda handle: None)
    assert files_under(tmp_path) == []


def test_sigterm_stops_a_run_like_ctrl_c_and_the_same_command_resumes(tmp_path: Path) -> None:
    """A real process: SIGTERM mid-run ends it with the resume line (exit 130) and the lock released."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    argv = [sys.executable, "-m", "fedaug", *run_dirs.argv(tmp_path, "--set", "train.rounds=200")]
    process = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    metrics: Path | None = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until it has finished a round
        metrics = next(tmp_path.rglob("metrics.jsonl"), None)
        if metrics is not None and metrics.stat().st_size > 0:
            break
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert err.strip().splitlines()[-1] == "fedaug: interrupted; run the same command again to resume"
    assert metrics is not None
    check_unlocked(metrics.parent)


@pytest.mark.parametrize(("cores", "expected"), [(1, 1), (2, 1), (3, 1), (4, 2), (16, 8), (64, 32)])
def test_the_default_thread_count_is_half_the_usable_cores(
    monkeypatch: pytest.MonkeyPatch, cores: int, expected: int
) -> None:
    """torch's default (every core) was 9-33x (smoke) and 2.1-3.8x (default preset) slower per round on a busy
    2-core machine (studies/speed/busy_core_*.json); half the cores leaves one for another process."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert default_threads() == expected
    before = torch.get_num_threads()
    try:
        use_threads(None)
        assert torch.get_num_threads() == expected
        use_threads(3)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


@given(st.floats(min_value=-limits.FLOAT32_MAX, max_value=limits.FLOAT32_MAX, allow_nan=False))
def test_the_float32_checks_round_as_numpy_does_without_importing_it(value: float) -> None:
    # the config is checked before numpy and torch are imported: the float32 rounding is struct's
    assert limits._as_float32(value) == float(np.float32(value))
    assert float(np.finfo(np.float32).max) == limits.FLOAT32_MAX
    for tiny, rounds_to_zero in ((7.006e-46, True), (7.007e-46, False), (1.4e-45, False), (1e-50, True)):
        assert (limits._as_float32(tiny) == 0) is rounds_to_zero
