"""scripts/flower_tls_demo.sh: SuperLink + 3 SuperNodes over TLS on loopback, FLea on UCI-HAR (2 rounds here,
``ROUNDS=2``; the script's default is 3: every round costs process starts).

Checks the script's own result check passed and that nothing it started is left running (every process it
starts carries ``FLWR_HOME`` inside the test's temporary folder) and that it removed its work folder.
Runs in CI (the issue asks for it): with 3 rounds 5.2 minutes in a clean-clone CI run on 2 cores with one
other job beside it, most of it process starts (Flower starts a fresh ClientApp process, importing torch,
for every message).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("flwr")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "flower_tls_demo.sh"


def _processes_with(marker: str) -> list[int]:
    pids = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker.encode() in environ.read_bytes():
                pids.append(int(environ.parent.name))
        except OSError:  # gone, or not ours to read
            continue
    return pids


def test_tls_demo_runs_flea_and_cleans_up(tmp_path: Path) -> None:
    # Prepare
    env = {**os.environ, "TMPDIR": str(tmp_path), "OMP_NUM_THREADS": "1", "ROUNDS": "2"}
    # Execute
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=1200)
    # Assert
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "FLea over TLS: round 1 acc" in done.stdout
    assert _processes_with(f"FLWR_HOME={tmp_path}") == []
    assert list(tmp_path.glob("fedaug-tls-demo.*")) == []
