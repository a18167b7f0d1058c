"""One writer per run dir, and crash-safe files: a second process is refused naming the holder's PID, a stale
lock after SIGKILL does not block the resume (which ends with the metrics of an uninterrupted run), a sweep
leaves a locked run alone, and a write cut short leaves the previous file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fedaug.cli.main import main
from fedaug.config.identity import run_dir_for
from fedaug.config.load import load_config, load_run_config
from fedaug.engine.checkpoint import RunStore, read_jsonl
from fedaug.engine.simulation import Simulation
from fedaug.errors import PathError, RunLockedError
from fedaug.runs.lock import LOCK_NAME, RunDirLock, check_unlocked
from fedaug.sweeps.order import SweepPoint
from fedaug.sweeps.sweep import run_sweep
from tests.conftest import REPO_ROOT, make_spec

SMOKE = str(REPO_ROOT / "configs" / "smoke.yaml")
SLOW = ["train.rounds=8", "train.local_epochs=100", "engine.num_threads=1"]
"""A run of a few seconds: long enough to be caught holding its lock and killed between rounds."""


def _sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def _run_dir(out: Path) -> Path:
    return run_dir_for(load_run_config([SMOKE], [*SLOW, f"out_dir={out}"]))  # as `fedaug run` names it


def _wait_for(condition: object, what: str, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while not condition():  # type: ignore[operator]
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_second_process_is_refused_and_a_stale_lock_does_not_block_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare: an uninterrupted run to compare with, and a second one started as its own process
    monkeypatch.setenv("FEDAUG_CACHE", str(tmp_path / "cache"))
    assert main(["run", SMOKE, "--out-dir", str(tmp_path / "full"), *_sets(SLOW)]) == 0
    argv = ["run", SMOKE, "--out-dir", str(tmp_path / "cut"), *_sets(SLOW)]
    env = {**os.environ, "FEDAUG_CACHE": str(tmp_path / "cache")}
    first = subprocess.Popen(
        [sys.executable, "-m", "fedaug", *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    run_dir = _run_dir(tmp_path / "cut")
    lock = run_dir / LOCK_NAME
    try:
        _wait_for(
            lambda: lock.exists() and lock.read_text().strip() == str(first.pid), "the first run's lock"
        )
        capsys.readouterr()
        # Execute: a second process on the same run dir
        code = main(argv)
        lines = capsys.readouterr().err.strip().splitlines()
        # Assert: refused at once, naming the holder
        assert code == 2
        assert lines == [
            f"fedaug: error: {run_dir} is in use by another fedaug process (PID {first.pid}); wait for it to "
            "end (or stop it), then run the same command again"
        ]
        # Execute: SIGKILL the first between rounds (its lock file stays behind)
        _wait_for(lambda: len(read_jsonl(run_dir / "metrics.jsonl")) >= 2, "two rounds")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == -signal.SIGKILL
    assert lock.read_text().strip() == str(first.pid)  # stale: nobody holds it
    check_unlocked(run_dir)  # the kernel released the lock with the process
    # Execute: resume
    assert main(argv) == 0
    # Assert: the metrics of the uninterrupted run, round for round
    full = read_jsonl(_run_dir(tmp_path / "full") / "metrics.jsonl")
    cut = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["round"] for r in cut] == list(range(1, 9))
    assert cut == full
    assert [r["round"] for r in read_jsonl(run_dir / "timings.jsonl")] == list(range(1, 9))


def test_lock_refuses_a_second_holder_and_is_released_on_any_exit(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with RunDirLock(run_dir):
        assert (run_dir / LOCK_NAME).read_text() == f"{os.getpid()}\n"
        with pytest.raises(RunLockedError, match=rf"in use by another fedaug process \(PID {os.getpid()}\)"):
            RunDirLock(run_dir).acquire()
        with pytest.raises(RunLockedError):
            check_unlocked(run_dir)
    with pytest.raises(ZeroDivisionError), RunDirLock(run_dir):
        raise ZeroDivisionError
    check_unlocked(run_dir)  # released by the exception
    with RunDirLock(run_dir):  # and free to take again
        pass


def test_lock_in_a_file_path_is_a_path_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(PathError, match=r"cannot create the run dir lock .*file/run/\.lock"):
        RunDirLock(tmp_path / "file" / "run").acquire()


def test_sweep_reports_a_locked_run_and_leaves_it_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDAUG_CACHE", str(tmp_path / "cache"))
    config = load_config([SMOKE], ["train.rounds=1", f"out_dir={tmp_path / 'runs'}"])
    point = SweepPoint(config, run_dir_for(config), {})
    with RunDirLock(point.run_dir):  # another process, as far as the lock can tell (another open file)
        result = run_sweep([point])
    assert [run_dir for run_dir, _ in result.busy] == [point.run_dir]
    assert f"PID {os.getpid()}" in result.busy[0][1]
    assert not result.failures and not result.finished
    assert sorted(p.name for p in point.run_dir.iterdir()) == [LOCK_NAME]  # nothing written
    assert run_sweep([point]).finished == [point.run_dir]  # once it is free, it runs


def test_a_checkpoint_write_cut_short_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RunStore(tmp_path)
    store.prepare()
    store.save_checkpoint({"round_num": 1, "state": {}, "client_states": {}})
    before = store.ckpt_path.read_bytes()

    def killed_midway(obj: object, handle: object) -> None:
        handle.write(b"PK\x03\x04 half a zip")  # type: ignore[attr-defined]
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        store.save_checkpoint({"round_num": 2, "state": {}, "client_states": {}})
    assert store.ckpt_path.read_bytes() == before
    assert store.load_checkpoint() is not None


def test_timings_of_a_round_killed_before_its_line_come_from_the_checkpoint(tmp_path: Path) -> None:
    Simulation(make_spec(tmp_path, rounds=2)).run()
    timings = tmp_path / "timings.jsonl"
    lines = timings.read_text().splitlines()
    timings.write_text(lines[0] + "\n")  # killed after round 2's checkpoint, before its timings line
    (tmp_path / "summary.json").unlink()
    Simulation(make_spec(tmp_path, rounds=3)).run()
    rounds = [r["round"] for r in read_jsonl(timings)]
    assert rounds == [1, 2, 3]
    assert "train" in read_jsonl(timings)[1]
