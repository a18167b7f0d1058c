"""A multi-worker sweep's workers stop with it (fedaug.sweeps.workers): stopped with SIGTERM, the sweep
terminates them and exits 130; killed outright, its workers end themselves; either way the runs resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedaug.engine.checkpoint import read_jsonl
from tests.conftest import SMOKE

SWEEP = """extends: {smoke}
name: stop
train:
  rounds: 5000
grid:
  seed: [0, 1]
"""


def _start(tmp_path: Path) -> subprocess.Popen[str]:
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP.format(smoke=SMOKE))
    command = [sys.executable, "-m", "fedaug", "sweep", str(sweep), "--workers", "2", "--device", "cpu",
               "--out-dir", str(tmp_path / "runs")]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


def _run_dirs(tmp_path: Path) -> list[Path]:
    return sorted(p.parent for p in (tmp_path / "runs").rglob("metrics.jsonl"))


def _worker_pids(tmp_path: Path, sweep: subprocess.Popen[str]) -> list[int]:
    """The PIDs holding the two runs' locks once both have logged rounds (the workers, not the sweep)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        dirs = _run_dirs(tmp_path)
        if len(dirs) == 2 and all(read_jsonl(d / "metrics.jsonl") for d in dirs):
            pids = [int((d / ".lock").read_text()) for d in dirs]
            assert sweep.pid not in pids
            return pids
        assert sweep.poll() is None, sweep.communicate()[1]
        time.sleep(0.2)
    raise AssertionError("the two runs did not start")


def _gone(pid: int, timeout: float) -> bool:
    """Whether ``pid`` exits within ``timeout`` s (a zombie has exited: whether and when the init process
    reaps an orphan is the machine's business)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (ProcessLookupError, FileNotFoundError):
            return True
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_workers_stop_with_the_sweep_and_the_runs_resume(tmp_path: Path, sig: signal.Signals) -> None:
    sweep = _start(tmp_path)
    try:
        workers = _worker_pids(tmp_path, sweep)
        os.kill(sweep.pid, sig)  # the sweep alone, as `kill PID` or a job scheduler would
        _, err = sweep.communicate(timeout=30)
        if sig == signal.SIGTERM:
            assert sweep.returncode == 130
            assert "sweep stopped: 2 worker(s) terminated, 2 run(s) unfinished" in err
            assert "run the same command again to resume" in err
            assert "leaked semaphore" not in err, err  # the workers' tqdm lock is a thread lock
        assert all(_gone(pid, timeout=10) for pid in workers)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    # nothing holds the runs any more: run again, they resume where they stopped (not BUSY, not from round 1)
    before = {d: read_jsonl(d / "metrics.jsonl") for d in _run_dirs(tmp_path)}
    assert all(0 < len(rows) < 5000 for rows in before.values())
    again = _start(tmp_path)
    try:
        deadline = time.monotonic() + 120
        while any(len(read_jsonl(d / "metrics.jsonl")) <= len(rows) for d, rows in before.items()):
            assert time.monotonic() < deadline and again.poll() is None, again.communicate()[1]
            time.sleep(0.2)
    finally:
        again.send_signal(signal.SIGTERM)
        _, err = again.communicate(timeout=60)
    assert "BUSY" not in err and "leaked semaphore" not in err, err
    for run_dir, rows in before.items():
        assert read_jsonl(run_dir / "metrics.jsonl")[: len(rows)] == rows
