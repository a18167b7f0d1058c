"""The GPU session's scripts run end to end on the CPU before a lent GPU's minutes are spent on them.

A lent GPU machine gives a task 15 minutes, starts included, so ``scripts/gpu_grid.sh`` and
``scripts/gpu_session.sh`` must work the first time there. Here they run with tiny settings on the CPU (the
CUDA tests skip, MPS and nvidia-smi are absent) and ``benchmarks/gpu_session_summary.py`` reads what they
wrote.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.helpers import gpu_session_summary

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="bash scripts")


def _script(name: str, tmp_path: Path, **env: str) -> str:
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / name)],
        env={**os.environ, "DEVICE": "cpu", "MPS": "0", "OMP_NUM_THREADS": "1", **env},
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


GRID_ENV = {  # gpu_grid.sh on the CPU: 3 splits x FedAvg and FLea, seed 0, K = 75, 2 rounds of 1 epoch
    "WORKERS": "2",
    "SEEDS": "0",
    "KS": "75",
    "SETS": "train.rounds=2 train.local_epochs=1 engine.keep_checkpoints=[]",  # the preset keeps 29, 99
}


# six HARNet runs and a probe (about 3 minutes on a busy 2-core machine): -m slow; the window's command today
# is gpu_campaign.sh, whose smoke test below stays in the default suite
@pytest.mark.slow
def test_the_session_grid_first_then_tests_and_probe_writes_what_the_summary_reads(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stdout = _script(
        "gpu_session.sh",
        tmp_path,
        OUT=str(out),
        RUNS=str(tmp_path / "runs"),
        GRID_FIRST="1",
        BUDGET="400",
        AFTER_S="60",
        TESTS_S="60",
        PROBE_ROUNDS="1",
        PROBE_MODES="sequential",
        **GRID_ENV,
    )
    assert "engine.cuda_graphs=true" in stdout  # GRID_FIRST: graphs unless GRAPHS=false (ignored on a CPU)
    log = (out / "grid.log").read_text()
    assert "sweep exit 0 after" in log, log
    report = (out / "report" / "report.md").read_text()
    assert "# 6 runs" in report and "| fedavg |" in report and "| flea |" in report
    with tarfile.open(out / "grid_runs.tgz") as tar:
        names = sorted(n for n in tar.getnames() if n.endswith(".gz"))
    assert len(names) == 12 and names[0] == "archive/uci_har-dirichlet0.1-K75/fedavg/seed0/metrics.jsonl.gz"
    tests = (out / "tests_graphs.txt").read_text()
    assert "skipped" in tests and "failed" not in tests  # the CUDA tests skip on the CPU
    summary = gpu_session_summary().summarise(out)
    grid = summary["grid"]
    assert (len(grid["runs"]), grid["rounds_done"]) == (6, 12)  # 3 splits x 2 methods, 2 rounds each
    assert grid["sweep_s"] is not None and not summary["targets"]["grid"]["met"]
    if shutil.which("nvidia-smi") is None:  # the script samples the GPU's memory only where it can
        assert grid["max_gpu_memory_mib"] is None and "GPU memory used" not in log
    assert sorted((row["method"], row["mode"]) for row in summary["probe"]) == [
        ("fedavg", "sequential"),
        ("flea", "sequential"),
    ]


def test_the_session_without_its_grid_decides_against_graphs_without_a_probe(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stdout = _script(
        "gpu_session.sh", tmp_path, OUT=str(out), GRID="0", BUDGET="100", TESTS_S="60", PROBE_S="1"
    )
    assert "grid: engine.cuda_graphs=false" in stdout and "grid skipped (GRID=0)" in stdout
    assert "probe exit 124" in (out / "probe.log").read_text()  # cut short: no probe.json, so no graphs
    assert gpu_session_summary().summarise(out)["probe"] == []


def test_the_grid_script_runs_another_papers_grid(tmp_path: Path, shared_data: Path) -> None:
    # CONFIG and GRIDS pick another preset and its axes (';' between them); BASELINE= reports without one
    out = tmp_path / "out"
    _script(
        "gpu_grid.sh",
        tmp_path,
        OUT=str(out),
        RUNS=str(tmp_path / "runs"),
        WORKERS="2",
        CONFIG="configs/experiments/fedaugmix_table3_mnist.yaml",
        GRIDS="seed=[0]; method=[fedavg, fedaugmix]",
        BASELINE="",
        SETS=f"data.data_dir={shared_data} train.rounds=1 train.local_epochs=1",
    )
    assert "sweep exit 0 after" in (out / "grid.log").read_text()
    report = (out / "report" / "report.md").read_text()
    assert report.startswith("# 2 runs") and "| fedaugmix |" in report and "minus" not in report
    with tarfile.open(out / "grid_runs.tgz") as tar:
        assert "archive/mnist-dirichlet0.5-K100/fedaugmix/seed0/summary.json" in tar.getnames()


def test_the_campaign_script_runs_the_next_runs_and_returns_its_files(tmp_path: Path) -> None:
    # a tiny campaign of two 2-round smoke runs (cost table: 10 s each, one at a time) in a 60-s budget
    campaign = tmp_path / "studies" / "campaign.yaml"
    campaign.parent.mkdir()
    campaign.write_text(
        "workers: {cpu: 1}\ngrids:\n"
        f"  - {{name: tiny, preset: {REPO_ROOT / 'configs' / 'smoke.yaml'}, study: tiny,\n"
        "     set: [train.rounds=2], grid: {seed: [0, 1], method: [fedavg]}, cost_s: {cpu: 10}}\n"
    )
    out = tmp_path / "out"
    stdout = _script(
        "gpu_campaign.sh", tmp_path, OUT=str(out), BUDGET="60", CAMPAIGN=str(campaign),
        RUNS=str(tmp_path / "runs"), DATA=str(tmp_path / "data"),
        BEFORE='for i in 1 2 3 4 5 6 7 8; do echo "$i" > "$OUT/probe_$i.txt"; done',  # a probe's 8 files
    )  # fmt: skip
    assert "campaign exit 0 after" in stdout and "BEFORE exit 0 after" in stdout
    assert sorted(p.name for p in out.iterdir()) == [
        "campaign.log",
        "campaign_summary.json",
        "probe.tgz",
        "tiny.tar.gz",
    ]  # the probe's files come back as one, and the campaign may write 5 archives, not 6
    with tarfile.open(out / "probe.tgz") as tar:
        assert sorted(tar.getnames())[-1] == "probe/probe_8.txt"
    assert "2 runs selected" in (out / "campaign.log").read_text()
    with tarfile.open(out / "tiny.tar.gz") as tar:
        assert sum(n.endswith("summary.json") for n in tar.getnames()) == 2
