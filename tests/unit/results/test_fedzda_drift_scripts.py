"""The Fed-ZDA drift scripts in studies/fedzda rebuild their committed JSON from the archived runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

FEDZDA = REPO_ROOT / "studies" / "fedzda"


def _run(script: str, *args: str | Path) -> str:
    done = subprocess.run(
        [sys.executable, str(FEDZDA / script), *map(str, args)],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    return done.stdout


@pytest.mark.parametrize(
    ("script", "args", "committed"),
    [
        ("burnin_drift.py", [FEDZDA / "runs"], FEDZDA / "burnin_drift.json"),
        (
            "cpu_drift.py",
            [FEDZDA / "runs", FEDZDA / "cpu_drift" / "runs"],
            FEDZDA / "cpu_drift" / "cpu_drift.json",
        ),
    ],
)
def test_scripts_rebuild_their_committed_json(
    tmp_path: Path, script: str, args: list[Path], committed: Path
) -> None:
    out = tmp_path / "out.json"
    _run(script, *args, "--out", out)
    assert json.loads(out.read_text()) == json.loads(committed.read_text())


def test_cpu_drift_of_the_seed2_fedavg_reruns() -> None:
    rows = json.loads((FEDZDA / "cpu_drift" / "cpu_drift.json").read_text())
    mnist_mm = rows["mnist-multimodal2_clients-K100/fedavg/seed2"]
    assert (mnist_mm["first_cpu"], mnist_mm["second_cpu"]) == ("AMD EPYC", "Intel(R) Xeon(R) Processor")
    assert mnist_mm["first_different_round"] == 2
    assert mnist_mm["global_acc_final"] == [91.6, 91.71]
    assert mnist_mm["global_acc_last10"] == [90.733, 90.743]
    # the CPU alone moves a last-10 mean by 0.051 points at most in these three runs
    assert max(abs(b - a) for a, b in (r["global_acc_last10"] for r in rows.values())) == pytest.approx(0.051)
